// Model parameters as data: each has its Megatron name, global shape, how it is initialised and
// whether weight decay applies; the training loop, optimizers and checkpoints only see these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megatron/tensor/tensor.h"

namespace megatron {

enum class ParamInit { normal, zeros, ones };

struct Parameter {
  std::string name;        // Megatron-core name, e.g. "decoder.layers.0.mlp.linear_fc1.weight"
  Shape global_shape;      // the unsplit shape, as stored in checkpoints
  int partition_dim = -1;  // tensor-parallel split dimension, -1 when replicated
  ParamInit init = ParamInit::zeros;
  float init_std = 0;        // for ParamInit::normal
  bool weight_decay = true;  // false for biases and norm weights (Megatron's no-decay group)
  Tensor value;              // this rank's shard; the fp32 master copy (or f64 in gradient tests)
  Tensor grad;               // same shape and dtype as value; accumulated over micro-batches
};

// Parameters in declaration order (the order of checkpoints, clipping sums and optimizer state).
class ParameterSet {
 public:
  Parameter& add(Parameter p);
  std::size_t size() const { return params_.size(); }
  Parameter& operator[](std::size_t i) { return *params_[i]; }
  const Parameter& operator[](std::size_t i) const { return *params_[i]; }
  // nullptr when absent.
  Parameter* find(const std::string& name);
  const Parameter* find(const std::string& name) const;
  std::int64_t numel() const;  // elements of all local shards
  auto begin() { return params_.begin(); }
  auto end() { return params_.end(); }
  auto begin() const { return params_.begin(); }
  auto end() const { return params_.end(); }

 private:
  std::vector<std::unique_ptr<Parameter>> params_;  // stable addresses
};

}  // namespace megatron
