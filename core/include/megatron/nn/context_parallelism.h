// A rank's place in its context-parallel group (Megatron's context_parallel_size): each sample's
// sequence is cut into 2·CP equal chunks and CP rank r holds chunks r and 2·CP−1−r, in that order,
// so every rank gets the same share of the causal mask's work.
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace megatron::nn
