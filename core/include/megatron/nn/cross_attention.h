// Megatron-core's CrossAttention (T5's decoder): queries from the decoder's hidden states, keys
// and values from the encoder output ("memory"), padding-masked, no rotary, output projection.
// Under tensor parallelism each rank holds whole heads (column-parallel linear_q / linear_kv,
// row-parallel linear_proj), so the attention itself needs no communication.
#pragma once

#include <string>

#include "megatron/nn/layer_context.h"
#include "megatron/nn/layer_inputs.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

class CrossAttention {
 public:
  // Sq / Sk are the full sequences and heads this rank's, also under sequence parallelism.
  struct Saved {
    Tensor q;     // (Sq, B, heads, hn)
    Tensor k, v;  // (Sk, B, heads, hn), contiguous
    Tensor out;   // (Sq, B, heads, hn)
    Tensor lse;   // (B, heads, Sq)
  };

  // Parameters `<prefix>.linear_q` (h -> heads * kv_channels), `<prefix>.linear_kv`
  // (h -> 2 * heads * kv_channels, per head [key | value]) and `<prefix>.linear_proj`.
  // Throws ConfigError for grouped-query attention (Megatron-core does not support it in
  // cross-attention) or when the tensor-parallel size does not divide the heads.
  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config);

  // x (Sq, B, h) and memory (Sk, B, h) -> y (Sq, B, h): the projection output with its bias,
  // before dropout. Under sequence parallelism all three are sequence shards (Sq / tp, Sk / tp).
  // The memory_padding_mask input (B, Sk) u8 masks padded encoder positions (undefined = none).
  // `dropout_site` seeds the attention-probability dropout. Throws Error on mismatched shapes.
  void forward(const LayerContext& ctx, const Tensor& x, const Tensor& memory,
               const LayerInputs& inputs, std::uint64_t dropout_site, Tensor& y,
               Saved& saved) const;
  // dx (shaped as x) overwritten; the gradient w.r.t. memory ADDED to dmemory_accumulate (shaped
  // as memory); parameter gradients accumulated.
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& memory, const Tensor& dy,
                const LayerInputs& inputs, std::uint64_t dropout_site, const Saved& saved,
                Tensor& dx, Tensor& dmemory_accumulate) const;

  Linear linear_q, linear_kv, linear_proj;

 private:
  void check_shapes(const Tensor& x, const Tensor& memory, const LayerInputs& inputs) const;
  AttentionParams params(const LayerContext& ctx, const LayerInputs& inputs,
                         std::uint64_t dropout_site, std::int64_t sq, std::int64_t sk,
                         std::int64_t b) const;
  TransformerConfig config_;
  TensorParallelism tp_;
  std::int64_t heads_ = 0;  // this rank's
};

}  // namespace megatron::nn
