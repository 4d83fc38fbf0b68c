// Megatron's MLP: linear_fc1 -> GeLU (or SwiGLU over [gate | up]) -> linear_fc2.
#pragma once

#include <string>

#include "megatron/nn/layer_context.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

class Mlp {
 public:
  struct Saved {
    Tensor fc1_out;  // (rows, ffn) or (rows, 2 ffn) with SwiGLU
    Tensor act_out;  // (rows, ffn)
  };

  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config);
  // x (rows, h) -> y (rows, h), fc2's output with its bias.
  void forward(const LayerContext& ctx, const Tensor& x, Tensor& y, Saved& saved) const;
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy, const Saved& saved,
                Tensor& dx) const;

  Linear fc1, fc2;

 private:
  TransformerConfig config_;
};

}  // namespace megatron::nn
