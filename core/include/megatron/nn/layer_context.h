// What every layer's forward and backward is told: the backend, training or evaluation, the
// dropout stream of the current micro-batch and the sequence's context-parallel split.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "megatron/backend/backend.h"
#include "megatron/nn/context_parallelism.h"

namespace megatron::nn {

// Metrics layers report during a training forward (Mixture of Experts' load-balancing and z
// losses): per name, the sum of the values reported and how many were. The model returns them
// as logged-only loss terms; the layers inject their losses' gradients themselves.
struct AuxLosses {
  std::map<std::string, std::pair<double, double>> terms;
  void add(const std::string& name, double value) {
    auto& [sum, count] = terms[name];
    sum += value;
    count += 1;
  }
};

struct LayerContext {
  Backend& backend;
  bool training = true;        // dropout on
  std::uint64_t seed = 0;      // dropout seed ([training] seed)
  std::uint64_t stream = 0;    // unique per (iteration, micro-batch); see dropout_offset()
  DType compute = DType::f32;  // GEMM input dtype: bf16/f16 for mixed precision
  // StepOptions::loss_scale: a layer adding a loss of its own scales that loss's gradient by it.
  float loss_scale = 1.0f;
  // Where a training forward reports its auxiliary losses; null: not reported (evaluation, or a
  // recomputed forward).
  AuxLosses* aux_losses = nullptr;
  // Added to every site: a block running layers of its own (Retro's retrieval encoder inside its
  // first decoder layer) gives them the sites after its own this way.
  std::uint64_t site_base = 0;
  // The sequence split over the context-parallel group: the layers see this rank's chunks, and
  // self-attention runs round the group's ring (ring_attention.h). Size 1: the whole sequence.
  ContextParallelism context = {};

  // Philox offset of dropout site `site` of this micro-batch. Each site owns 2^31 consecutive
  // indices (enough for the attention probabilities of a 2048-token, 96-head micro-batch) and
  // each micro-batch 2^40, so the same micro-batch recomputed gives the same masks.
  std::uint64_t dropout_offset(std::uint64_t site) const {
    return (stream << 40) + ((site_base + site) << 31);
  }
};

}  // namespace megatron::nn
