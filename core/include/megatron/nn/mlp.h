// Megatron's MLP: linear_fc1 -> GeLU (or SwiGLU over [gate | up]) -> linear_fc2; under tensor
// parallelism fc1 is column-parallel (SwiGLU: gate and up split separately, so each rank holds
// [gate_r | up_r]) and fc2 row-parallel.
#pragma once

#include <string>

#include "megatron/nn/layer_context.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

class Mlp {
 public:
  // rows of the full sequence, ffn this rank's share.
  struct Saved {
    Tensor fc1_out;  // (rows, ffn) or (rows, 2 ffn) with SwiGLU
    Tensor act_out;  // (rows, ffn)
  };

  // Throws ConfigError unless the factory's tensor-parallel size divides ffn_hidden_size.
  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config);
  // x (rows, h) -> y (rows, h), fc2's output with its bias; under sequence parallelism both are
  // (rows / tp, h) sequence shards.
  void forward(const LayerContext& ctx, const Tensor& x, Tensor& y, Saved& saved) const;
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy, const Saved& saved,
                Tensor& dx) const;

  Linear fc1, fc2;

 private:
  TransformerConfig config_;
  TensorParallelism tp_;
  std::int64_t ffn_ = 0;  // this rank's ffn_hidden_size
};

}  // namespace megatron::nn
