// One pre-norm layer: x += Dropout(Attn(LN1(x))); x += Dropout(MLP(LN2(x))), and with a
// cross-attention slot Megatron's T5 decoder layer, which adds
// x += Dropout(CrossAttn(pre_cross_attn_layernorm(x), memory)) between the two. The one-block
// kinds of hybrid stacks (LayerKind attention, mlp, mamba) keep one of the blocks, the Mamba
// layer's being x += Dropout(MambaMixer(norm(x))).
#pragma once

#include <string>

#include "megatron/nn/attention.h"
#include "megatron/nn/cross_attention.h"
#include "megatron/nn/layer_spec.h"
#include "megatron/nn/mamba_mixer.h"
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
    MambaMixer::Saved mamba;  // Mamba layers only (the mixer's input is ln1)
    Tensor x1;                // after the first block's residual
    Norm::Saved norm_cross;   // cross-attention layers only
    Tensor ln_cross;
    CrossAttention::Saved cross;
    Tensor x2;  // the MLP block's input: after the cross-attention residual, else x1
    Norm::Saved norm2;
    Tensor ln2;
    Mlp::Saved mlp;
    bool valid = false;
  };

  // Dropout sites a layer of `spec` uses: attention probabilities, after attention, after the
  // MLP; a cross-attention layer also its probabilities and after cross-attention (sites 3, 4,
  // so the first three are numbered as in every layer).
  // The one-block kinds: attention 2 (probabilities, after attention), MLP and Mamba 1 (after the
  // block).
  static std::uint64_t dropout_sites(const LayerSpec& spec);
  // The layer's dropout sites are first_dropout_site + [0, dropout_sites(spec)), allocated by
  // whoever declares the model (a layer kind never shares another's streams).
  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config,
               const LayerSpec& spec, std::uint64_t first_dropout_site);
  // x, y (S, B, h), or (S / tp, B, h) sequence shards under sequence parallelism; saved is filled
  // only when `keep`. A cross-attention layer reads inputs.memory and memory_padding_mask.
  void forward(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs, Tensor& y,
               Saved& saved, bool keep) const;
  // Needs a saved forward; dx (S, B, h) overwritten; releases `saved`. A cross-attention layer
  // adds its gradient w.r.t. memory to *inputs.memory_grad (Error when null).
  void backward(const LayerContext& ctx, const Tensor& dy, const LayerInputs& inputs, Saved& saved,
                Tensor& dx) const;

  Norm input_layernorm, pre_mlp_layernorm;  // input_layernorm: the Mamba layer's `norm` too
  SelfAttention self_attention;
  MambaMixer mixer;  // Mamba layers only
  Mlp mlp;
  Norm pre_cross_attn_layernorm;  // cross-attention layers only
  CrossAttention cross_attention;

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
  bool has_attention() const {
    return kind_ == LayerKind::transformer || kind_ == LayerKind::attention;
  }
  bool has_mlp() const { return kind_ == LayerKind::transformer || kind_ == LayerKind::mlp; }
  // The MLP block's hidden-dropout site (after attention's two in a transformer layer).
  int mlp_site() const { return kind_ == LayerKind::mlp ? 0 : 2; }

  std::uint64_t first_site_ = 0;
  LayerKind kind_ = LayerKind::transformer;
  bool cross_ = false;
};

}  // namespace megatron::nn
