// For the reference dumps: Megatron initialises biases and norm biases to zero and norm weights to
// one; perturbing them means a bias or norm parameter used wrongly cannot hide behind its initial
// value when PyTorch recomputes the model from the dumped weights.
#pragma once

#include <random>

#include "megatron/nn/parameter.h"

namespace megatron::reference {

inline void perturb_constant_parameters(ParameterSet& params, std::mt19937& rng) {
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (auto& p : params) {
    if (p->init == ParamInit::normal) continue;
    float* v = p->value.data<float>();
    for (std::int64_t i = 0; i < p->value.numel(); ++i)
      v[i] += noise(rng);
  }
}

}  // namespace megatron::reference
