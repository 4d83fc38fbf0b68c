// What every layer's forward and backward is told: the backend, training or evaluation, and the
// dropout stream of the current micro-batch.
#pragma once

#include <cstdint>

#include "megatron/backend/backend.h"

namespace megatron::nn {

struct LayerContext {
  Backend& backend;
  bool training = true;        // dropout on
  std::uint64_t seed = 0;      // dropout seed ([training] seed)
  std::uint64_t stream = 0;    // unique per (iteration, micro-batch); see dropout_offset()
  DType compute = DType::f32;  // GEMM input dtype: bf16/f16 for mixed precision

  // Philox offset of dropout site `site` of this micro-batch. Each site owns 2^31 consecutive
  // indices (enough for the attention probabilities of a 2048-token, 96-head micro-batch) and
  // each micro-batch 2^40, so the same micro-batch recomputed gives the same masks.
  std::uint64_t dropout_offset(std::uint64_t site) const { return (stream << 40) + (site << 31); }
};

}  // namespace megatron::nn
