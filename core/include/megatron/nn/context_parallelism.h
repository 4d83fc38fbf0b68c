// A rank's place in its context-parallel group (Megatron's context_parallel_size): each sample's
// sequence is cut into 2·CP equal chunks and CP rank r holds chunks r and 2·CP−1−r, in that order,
// so every rank gets the same share of the causal mask's work.
#pragma once

#include <cstdint>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/batch.h"
#include "megatron/parallel/communicator.h"

namespace megatron::nn {

struct ContextParallelism {
  Communicator* comm = nullptr;  // the CP group's device communicator; null when size is 1
  int rank = 0;
  int size = 1;
  bool split() const { return size > 1; }
};

// The global positions this rank holds of a sequence of `seq` tokens (seq divisible by 2·size):
// chunk `rank`, then chunk 2·size−1−rank.
std::vector<std::int64_t> context_positions(const ContextParallelism& cp, std::int64_t seq);

// This rank's share of a micro-batch (Megatron's get_batch_on_this_cp_rank): every field of
// shape (B, seq) (tokens, labels, loss_mask, position_ids, the documents' first keys) cut to the
// rank's positions, values unchanged (position ids and first keys stay positions in the whole
// sequence), except those `model_inputs` marks whole_sequence; other fields whole. When
// `model_inputs` takes position_ids and the batch has none: adds position_ids (B, seq / cp)
// holding the global positions, since a learned position embedding cannot tell them once the
// sequence is cut.
Batch context_parallel_batch(const Batch& batch, const ContextParallelism& cp, std::int64_t seq,
                             const SampleSpec& model_inputs);

// `value` summed over the context-parallel group (on the group's devices, in f64); `value` itself
// when the sequence is not split.
double context_parallel_sum(Backend& be, const ContextParallelism& cp, double value);
// Each of `values` summed over the context-parallel group, in one reduction.
std::vector<double> context_parallel_sum(Backend& be, const ContextParallelism& cp,
                                         std::vector<double> values);

}  // namespace megatron::nn
