// Parameter declaration, initialisation and gradient zeroing.
#include "megatron/nn/init.h"

#include <algorithm>
#include <cmath>

#include "megatron/error.h"

namespace megatron::nn {

Parameter& ParamFactory::declare(const std::string& name, const Shape& shape, ParamInit init,
                                 float init_std, bool weight_decay, Split split) {
  Parameter p;
  p.name = name;
  p.global_shape = shape;
  p.partition_dim = split.dim;
  if (split.dim >= 0) {
    p.partition_count = tp.size;
    p.partition_rank = tp.rank;
    p.partition_blocks =
        split.block_sizes.empty() ? split.blocks : static_cast<int>(split.block_sizes.size());
    p.partition_block_sizes = split.block_sizes;
  }
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  const Shape local = shard_shape(p);  // throws, naming the parameter, when it does not divide
  p.value = Tensor::empty(local, dtype, device);
  p.grad = Tensor::empty(local, dtype, device);
  return params.add(std::move(p));
}

Parameter& ParamFactory::declare_buffer(const std::string& name, const Shape& shape) {
  if (!buffers) {
    throw Error("cannot declare buffer '" + name + "': the model gives its layers no buffer set");
  }
  Parameter p;
  p.name = name;
  p.global_shape = shape;
  p.init = ParamInit::zeros;
  p.weight_decay = false;
  p.value = Tensor::empty(shape, DType::f32, device);
  if (!device.is_meta()) backend_for(device).fill(p.value, 0.0);
  return buffers->add(std::move(p));
}

Parameter& ParamFactory::declare_experts(const std::string& name, const Shape& shape,
                                         ParamInit init, float init_std,
                                         std::int64_t experts_per_token) {
  const std::int64_t experts = shape.at(0);
  if (experts % ep.size != 0) {
    throw ConfigError("[parallel] expert_model_parallel_size " + std::to_string(ep.size) +
                      " must divide num_experts (" + std::to_string(experts) + " in " + name + ")");
  }
  Parameter p;
  p.name = name;
  p.global_shape = shape;
  p.partition_dim = 0;
  p.partition_count = ep.size;
  p.partition_rank = ep.rank;
  p.experts = experts;
  p.experts_per_token = experts_per_token;
  p.init = init;
  p.init_std = init_std;
  const Shape local = shard_shape(p);
  p.value = Tensor::empty(local, dtype, device);
  p.grad = Tensor::empty(local, dtype, device);
  return params.add(std::move(p));
}

namespace {

// A shard's slice of the global initialisation: draw the global tensor, copy this rank's runs.
// One parameter at a time, so the temporary is at most the largest global tensor.
void fill_normal_shard(Backend& backend, Parameter& p, std::uint64_t seed, std::uint64_t offset) {
  Tensor global = backend.empty(p.global_shape, p.value.dtype());
  backend.fill_normal(global, 0.0f, p.init_std, seed, offset);
  for (const ShardRun& run : shard_runs(p)) {
    Tensor dst = p.value.slice(p.partition_dim, run.local_offset, run.length);
    backend.copy(global.slice(p.partition_dim, run.global_offset, run.length), dst);
  }
}

// The uniform kinds: the global tensor drawn on the host from U[0, 1) (Philox, so any backend
// and layout gets the same numbers), mapped per the kind, and this rank's runs copied out.
void fill_uniform_kind(Backend& backend, Parameter& p, std::uint64_t seed, std::uint64_t offset) {
  Tensor global = Tensor::empty(p.global_shape, DType::f64);
  backend_for(Device::cpu()).fill_uniform(global, 0.0f, 1.0f, seed, offset);
  double* v = global.data<double>();
  const double low = p.init_low, high = p.init_high;
  for (std::int64_t i = 0; i < global.numel(); ++i) {
    switch (p.init) {
      case ParamInit::uniform:
        v[i] = low + (high - low) * v[i];
        break;
      case ParamInit::log_uniform:
        v[i] = std::log(low + (high - low) * v[i]);
        break;
      case ParamInit::inverse_softplus_log_uniform: {
        // MambaMixer: dt = exp(U * (log max - log min) + log min) clamped to the floor, then
        // dt + log(-expm1(-dt)), the inverse of softplus.
        const double dt =
            std::max(std::exp(v[i] * (std::log(high) - std::log(low)) + std::log(low)),
                     static_cast<double>(p.init_floor));
        v[i] = dt + std::log(-std::expm1(-dt));
        break;
      }
      default:
        throw Error("parameter '" + p.name + "' does not have a uniform initialisation");
    }
  }
  const Tensor typed = global.to(p.value.dtype());
  for (const ShardRun& run : shard_runs(p)) {
    const int dim = std::max(0, p.partition_dim);
    Tensor dst = p.value.dim() ? p.value.slice(dim, run.local_offset, run.length) : p.value;
    backend.copy(typed.dim() ? typed.slice(dim, run.global_offset, run.length) : typed, dst);
  }
}

}  // namespace

void initialize_parameters(Backend& backend, ParameterSet& params, std::uint64_t seed) {
  std::uint64_t position = 0;
  for (auto& p : params) {
    // The stream is the parameter's place in the whole model, so a pipeline stage holding only
    // some parameters draws the same numbers for them as one rank holding all.
    const std::uint64_t index =
        p->init_index >= 0 ? static_cast<std::uint64_t>(p->init_index) : position;
    ++position;
    if (p->value.device().is_meta()) continue;
    switch (p->init) {
      case ParamInit::normal:
        if (p->partition_count > 1) {
          fill_normal_shard(backend, *p, seed, index << 40);
        } else {
          backend.fill_normal(p->value, 0.0f, p->init_std, seed, index << 40);
        }
        break;
      case ParamInit::zeros:
        backend.fill(p->value, 0.0);
        break;
      case ParamInit::ones:
        backend.fill(p->value, 1.0);
        break;
      case ParamInit::uniform:
      case ParamInit::log_uniform:
      case ParamInit::inverse_softplus_log_uniform:
        fill_uniform_kind(backend, *p, seed, index << 40);
        break;
    }
    backend.fill(p->grad, 0.0);
  }
}

void zero_gradients(Backend& backend, ParameterSet& params) {
  for (auto& p : params)
    if (!p->grad.device().is_meta()) backend.fill(p->grad, 0.0);
}

}  // namespace megatron::nn
