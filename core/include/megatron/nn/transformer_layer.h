// One pre-norm transformer layer: x += Dropout(Attn(LN1(x))); x += Dropout(MLP(LN2(x))).
#pragma once

#include <string>

#include "megatron/nn/attention.h"
#include "megatron/nn/layer_spec.h"
#include "megatron/nn/mlp.h"
#include "megatron/nn/norm.h"

namespace megatron::nn {

class TransformerLayer {
 public:
  // Activations backward needs; empty after a forward without `keep` (recomputed layers).
  struct Saved {
    Tensor x;  // input (S, B, h)
    Norm::Saved norm1;
    Tensor ln1;  // (S, B, h)
    SelfAttention::Saved attention;
    Tensor x1;  // after the attention residual
    Norm::Saved norm2;
    Tensor ln2;
    Mlp::Saved mlp;
    bool valid = false;
  };

  // Dropout sites the layer uses: attention probabilities, after attention, after the MLP.
  static constexpr std::uint64_t kDropoutSites = 3;
  // The layer's dropout sites are first_dropout_site + [0, kDropoutSites), allocated by whoever
  // declares the model (a layer kind never shares another's streams).
  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config,
               const LayerSpec& spec, std::uint64_t first_dropout_site);
  // x, y (S, B, h), or (S / tp, B, h) sequence shards under sequence parallelism; saved is filled
  // only when `keep`.
  void forward(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs, Tensor& y,
               Saved& saved, bool keep) const;
  // Needs a saved forward; dx (S, B, h) overwritten; releases `saved`.
  void backward(const LayerContext& ctx, const Tensor& dy, const LayerInputs& inputs, Saved& saved,
                Tensor& dx) const;

  Norm input_layernorm, pre_mlp_layernorm;
  SelfAttention self_attention;
  Mlp mlp;

 private:
  std::uint64_t site(int k) const { return first_site_ + static_cast<std::uint64_t>(k); }
  // Philox offset of hidden-dropout site k for an activation shard of `numel` elements: a
  // sequence shard continues the unsplit tensor's stream at its first element, so the masks
  // equal the single-rank run's; replicated activations use the same masks on every rank.
  std::uint64_t hidden_offset(const LayerContext& ctx, int k, std::int64_t numel) const {
    return ctx.dropout_offset(site(k)) + tp_sequence_offset(tp_, numel);
  }
  TransformerConfig config_;
  TensorParallelism tp_;
  std::uint64_t first_site_ = 0;
};

}  // namespace megatron::nn
