// LayerNorm or RMSNorm over the hidden dimension, with the statistics backward needs.
#pragma once

#include <string>

#include "megatron/nn/init.h"

namespace megatron::nn {

enum class NormKind { layernorm, rmsnorm };

struct Norm {
  NormKind kind = NormKind::layernorm;
  float eps = 1e-5f;
  Parameter* weight = nullptr;
  Parameter* bias = nullptr;  // LayerNorm only

  struct Saved {
    Tensor mean, rstd;
  };

  static Norm declare(ParamFactory& factory, const std::string& prefix, std::int64_t hidden,
                      NormKind kind, float eps);
  // The same norm named as Transformer Engine's fused LayerNormLinear names it, inside the linear
  // layer it feeds: `<linear_prefix>.layer_norm_weight` / `.layer_norm_bias` (Megatron-core's
  // Mamba and hybrid specs: mixer.in_proj, self_attention.linear_qkv, mlp.linear_fc1).
  static Norm declare_fused(ParamFactory& factory, const std::string& linear_prefix,
                            std::int64_t hidden, NormKind kind, float eps);
  // x, y (rows, hidden).
  void forward(Backend& backend, const Tensor& x, Tensor& y, Saved& saved) const;
  // dx overwritten; parameter gradients accumulated.
  void backward(Backend& backend, const Tensor& dy, const Tensor& x, const Saved& saved,
                Tensor& dx) const;
};

}  // namespace megatron::nn
