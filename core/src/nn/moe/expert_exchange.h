// The all-to-all token dispatcher's exchange (Megatron's MoEAlltoAllTokenDispatcher): rows in
// global expert order travel to the ranks holding their experts and come back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/nn/tensor_parallel.h"

namespace megatron::nn::moe {

// One micro-batch's exchange over the expert-parallel group. Every member sends the rows it
// routed to each rank's experts; a rank receives them grouped by source rank, then by local
// expert, and sorts them to local-expert-major order, sources in rank order within an expert
// (Megatron's sort_chunks_by_idxs), for its grouped GEMMs. combine() is the exact reverse. With a
// group of one both are the identity and nothing is communicated.
class ExpertExchange {
 public:
  // `rows_per_expert`: this rank's rows for each global expert, the rows themselves in expert
  // order. Exchanges the counts (a collective: every member must call it).
  ExpertExchange(Backend& backend, const ExpertParallelism& ep,
                 const std::vector<std::int64_t>& rows_per_expert);

  // Rows per local expert after dispatch (every source's).
  const std::vector<std::int64_t>& local_rows() const { return local_rows_; }
  std::int64_t received_rows() const { return received_; }

  // (sent rows, h) in global expert order -> (received rows, h) in local expert order.
  Tensor dispatch(Backend& backend, const Tensor& rows) const;
  // (received rows, h) in local expert order -> (sent rows, h) in global expert order.
  Tensor combine(Backend& backend, const Tensor& local) const;

 private:
  // all_to_all_v of whole rows of width h.
  Tensor exchange(Backend& backend, const Tensor& rows, const std::vector<std::int64_t>& send,
                  const std::vector<std::int64_t>& recv, std::int64_t recv_total) const;

  ExpertParallelism ep_;
  std::vector<std::int64_t> send_rows_, recv_rows_;  // per group rank
  std::vector<std::int64_t> local_rows_;             // per local expert
  std::int64_t sent_ = 0, received_ = 0;
  Tensor sort_, unsort_;  // i32 gather indices: source-major -> expert-major, and back
};

}  // namespace megatron::nn::moe
