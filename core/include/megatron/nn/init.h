// Declaring and initialising parameters: allocation on the build device, Megatron's init rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/nn/parameter.h"
#include "megatron/nn/tensor_parallel.h"

namespace megatron::nn {

// How a parameter is split over the tensor-parallel group: along `dim` (-1: replicated), in
// `blocks` equal blocks each split separately (see Note [Tensor-parallel shards]).
struct Split {
  int dim = -1;
  int blocks = 1;
  std::vector<std::int64_t> block_sizes = {};  // unequal blocks (Parameter::partition_block_sizes)
};

// Where and in which dtype parameters are allocated, and the tensor-parallel group they are
// split over.
struct ParamFactory {
  ParameterSet& params;
  Device device = Device::cpu();
  DType dtype = DType::f32;
  TensorParallelism tp = {};
  ExpertParallelism ep = {};

  // Declares a parameter of global shape `shape` and allocates this rank's shard of it and its
  // grad, both uninitialised until initialize_parameters (or zero_gradients for the grad) runs
  // (meta: nothing allocated). partition_dim is recorded even when unsplit, so `plan`
  // can derive per-rank sizes for any tensor-parallel size.
  Parameter& declare(const std::string& name, const Shape& shape, ParamInit init,
                     float init_std = 0, bool weight_decay = true, Split split = {});
  // Declares an MoE layer's grouped expert weight of global shape (experts, ...):
  // Parameter::experts and experts_per_token are set, and this rank's shard is its expert-parallel
  // share of whole experts along dim 0 (partition_count = ep.size). Throws ConfigError naming
  // expert_model_parallel_size when the experts do not divide over the group.
  Parameter& declare_experts(const std::string& name, const Shape& shape, ParamInit init,
                             float init_std, std::int64_t experts_per_token);

  // Where declare_buffer puts the model's buffers (Model::buffers); null: none may be declared.
  ParameterSet* buffers = nullptr;
  // Declares state kept beside the parameters and never trained (Megatron's persistent buffers,
  // e.g. MoE's router.expert_bias): replicated, f32 whatever the parameters' dtype (Megatron keeps
  // the expert bias in fp32), zeros, no gradient. Throws Error naming it without a buffer set.
  Parameter& declare_buffer(const std::string& name, const Shape& shape);
};

// Fills every parameter per its ParamInit. Normal parameter k uses the Philox stream
// (seed, k << 40) over its GLOBAL tensor, and a shard takes its slice of it: the same weights on
// every backend, thread count, run and tensor-parallel layout.
void initialize_parameters(Backend& backend, ParameterSet& params, std::uint64_t seed);

// Sets every gradient to zero.
void zero_gradients(Backend& backend, ParameterSet& params);

}  // namespace megatron::nn
