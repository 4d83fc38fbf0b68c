// Declaring and initialising parameters: allocation on the build device, Megatron's init rules.
#pragma once

#include <cstdint>
#include <string>

#include "megatron/backend/backend.h"
#include "megatron/nn/parameter.h"

namespace megatron::nn {

// Where and in which dtype parameters are allocated.
struct ParamFactory {
  ParameterSet& params;
  Device device = Device::cpu();
  DType dtype = DType::f32;

  // Declares a parameter and allocates its value and a zeroed grad (meta: nothing allocated).
  Parameter& declare(const std::string& name, const Shape& shape, ParamInit init,
                     float init_std = 0, bool weight_decay = true);
};

// Fills every parameter per its ParamInit. Normal parameter k uses the Philox stream
// (seed, k << 40): the same numbers on every backend, thread count and run.
void initialize_parameters(Backend& backend, ParameterSet& params, std::uint64_t seed);

// Sets every gradient to zero.
void zero_gradients(Backend& backend, ParameterSet& params);

}  // namespace megatron::nn
