// Megatron's self-attention: fused QKV projection laid out per query group, optional rotary
// embedding, fused causal attention (grouped-query) and the output projection.
#pragma once

#include <string>

#include "megatron/nn/layer_context.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

class SelfAttention {
 public:
  struct Saved {
    Tensor q, k, v;  // (S, B, heads, hn) after rotary, contiguous
    Tensor out;      // (S, B, heads, hn)
    Tensor lse;      // (B, heads, S)
  };

  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config);

  // x (S, B, h) -> y (S, B, h): the projection output with its bias, before dropout.
  // `dropout_site` seeds the attention-probability dropout.
  void forward(const LayerContext& ctx, const Tensor& x, const RotaryTables* rotary,
               std::uint64_t dropout_site, Tensor& y, Saved& saved) const;
  // dx (S, B, h) overwritten; parameter gradients accumulated.
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const RotaryTables* rotary, std::uint64_t dropout_site, const Saved& saved,
                Tensor& dx) const;

  Linear qkv, proj;

 private:
  AttentionParams params(const LayerContext& ctx, std::uint64_t dropout_site) const;
  TransformerConfig config_;
};

}  // namespace megatron::nn
