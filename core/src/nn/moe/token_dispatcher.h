// Megatron's two token dispatchers (moe_token_dispatcher_type): how one micro-batch's routed
// tokens reach the experts this rank holds, and how the experts' outputs come back weighted by
// their routing probabilities, with the backward of each step.
//  - alltoall (MoEAlltoAllTokenDispatcher): each rank permutes its own tokens into expert order
//    and the rows travel to their experts' ranks and back by all-to-all (moe::ExpertExchange).
//  - allgather (MoEAllGatherTokenDispatcher): every rank gathers the expert-parallel group's
//    tokens and routing, runs its experts on the tokens routed to them, and the partial outputs
//    are summed back to their tokens' ranks by reduce-scatter (backward: the reverse collectives).
// Both hand the experts the same rows in the same order (local-expert-major; within an expert the
// source ranks in order, each source's tokens in order), so the experts' GEMMs do not depend on
// the dispatcher; with an expert-parallel group of one nothing is communicated.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/nn/moe/moe_config.h"
#include "megatron/nn/moe/routing.h"
#include "megatron/nn/tensor_parallel.h"

namespace megatron::nn::moe {

// One micro-batch's dispatch, built from its routing (a collective: every member of the
// expert-parallel group builds its own for the same micro-batch, in the same order).
class Dispatcher {
 public:
  virtual ~Dispatcher() = default;

  // Rows each local expert receives from dispatch(), every source's.
  const std::vector<std::int64_t>& local_rows() const { return local_rows_; }

  // x_rows (t, h) -> the local experts' input rows (R, h).
  virtual Tensor dispatch(Backend& backend, const Tensor& x_rows) = 0;
  // The local experts' outputs (R, h) -> y_rows (t, h), overwritten: each token's expert outputs
  // weighted by their routing probabilities and summed. Keeps the outputs for combine_backward.
  virtual void combine(Backend& backend, const Tensor& local_out, Tensor& y_rows) = 0;
  // dy_rows (t, h) -> the local experts' output gradient (R, h); dprobs (t x E, this rank's
  // tokens, zeros where not routed) receives the routing probabilities' gradient.
  virtual Tensor combine_backward(Backend& backend, const Tensor& dy_rows,
                                  std::vector<double>& dprobs) = 0;
  // The local experts' input gradient (R, h) -> dx_rows (t, h), overwritten.
  virtual void dispatch_backward(Backend& backend, const Tensor& dlocal, Tensor& dx_rows) = 0;

 protected:
  std::vector<std::int64_t> local_rows_;
};

// `routing` is this rank's tokens'; `dtype` the activations'.
std::unique_ptr<Dispatcher> make_dispatcher(TokenDispatcher kind, Backend& backend,
                                            const ExpertParallelism& ep, const Routing& routing,
                                            DType dtype);

}  // namespace megatron::nn::moe
