// The core's block kinds, ordinary implementations of Mixer: self-attention, cross-attention, the
// MLP and the Mamba-2 mixer; and the specs Megatron-core's layers are made of.
#pragma once

#include <memory>

#include "megatron/nn/attention.h"
#include "megatron/nn/block.h"
#include "megatron/nn/cross_attention.h"
#include "megatron/nn/mamba_mixer.h"
#include "megatron/nn/mlp.h"

namespace megatron::nn {

// Self-attention of `mask`; reads rotary_cos/sin, key_padding_mask, first_key, attention_bias
// (and adds the bias's gradient). One dropout site of its own: the attention probabilities.
class SelfAttentionBlock : public Mixer {
 public:
  explicit SelfAttentionBlock(AttentionMask mask) : mask_(mask) {}
  std::uint64_t dropout_sites() const override { return 1; }
  std::vector<std::string> gradient_inputs() const override {
    return {layer_input::attention_bias};
  }
  void declare(ParamFactory& factory, const std::string& prefix,
               const TransformerConfig& config) override;
  std::unique_ptr<Saved> forward(const LayerContext& ctx, const Tensor& x,
                                 const LayerInputs& inputs, std::uint64_t first_site,
                                 Tensor& y) const override;
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                Tensor& dx) const override;
  // Causal self-attention decodes with its keys and values cached; padded masks do not decode.
  Decoding decoding() const override {
    return mask_ == AttentionMask::causal ? Decoding::cached : Decoding::none;
  }
  std::unique_ptr<Cache> start_cache(Backend& backend, std::int64_t batch, std::int64_t max_tokens,
                                     DType dtype) const override;
  void forward_cached(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                      Cache& cache, std::int64_t past, Tensor& y) const override;
  SelfAttention attention;

 private:
  AttentionMask mask_;
};

// Cross-attention to the `memory` input, masked by memory_padding_mask; adds the memory's
// gradient. One dropout site of its own: the attention probabilities.
class CrossAttentionBlock : public Mixer {
 public:
  std::uint64_t dropout_sites() const override { return 1; }
  std::vector<std::string> gradient_inputs() const override { return {layer_input::memory}; }
  void declare(ParamFactory& factory, const std::string& prefix,
               const TransformerConfig& config) override;
  std::unique_ptr<Saved> forward(const LayerContext& ctx, const Tensor& x,
                                 const LayerInputs& inputs, std::uint64_t first_site,
                                 Tensor& y) const override;
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                Tensor& dx) const override;
  CrossAttention attention;
};

class MlpBlock : public Mixer {
 public:
  Decoding decoding() const override { return Decoding::stateless; }
  void declare(ParamFactory& factory, const std::string& prefix,
               const TransformerConfig& config) override;
  std::unique_ptr<Saved> forward(const LayerContext& ctx, const Tensor& x,
                                 const LayerInputs& inputs, std::uint64_t first_site,
                                 Tensor& y) const override;
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                Tensor& dx) const override;
  Mlp mlp;
};

class MambaBlock : public Mixer {
 public:
  void declare(ParamFactory& factory, const std::string& prefix,
               const TransformerConfig& config) override;
  std::unique_ptr<Saved> forward(const LayerContext& ctx, const Tensor& x,
                                 const LayerInputs& inputs, std::uint64_t first_site,
                                 Tensor& y) const override;
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                Tensor& dx) const override;
  // Decodes with its conv window and SSM state (MambaMixer::DecodeState).
  Decoding decoding() const override { return Decoding::cached; }
  std::unique_ptr<Cache> start_cache(Backend& backend, std::int64_t batch, std::int64_t max_tokens,
                                     DType dtype) const override;
  void forward_cached(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                      Cache& cache, std::int64_t past, Tensor& y) const override;
  MambaMixer mixer;
};

// How a block's norm is named: Megatron-core's local spec (input_layernorm, pre_mlp_layernorm,
// a Mamba layer's norm) or Transformer Engine's fused LayerNormLinear (inside the linear layer
// the norm feeds: self_attention.linear_qkv, mlp.linear_fc1, mixer.in_proj), the names of
// Megatron-core's Mamba/hybrid checkpoints.
enum class NormNames { local, fused };

// input_layernorm -> self_attention
BlockSpec self_attention_block(AttentionMask mask = AttentionMask::causal,
                               NormNames names = NormNames::local);
// pre_cross_attn_layernorm -> cross_attention
BlockSpec cross_attention_block();
// pre_mlp_layernorm -> mlp
BlockSpec mlp_block(NormNames names = NormNames::local);
// norm -> mixer
BlockSpec mamba_block(NormNames names = NormNames::local);
// GPT's and BERT's layer: self-attention of `mask`, then the MLP.
LayerSpec transformer_layer_spec(AttentionMask mask = AttentionMask::causal);
// Megatron-core's T5 decoder layer: self-attention of `mask`, cross-attention to the encoder
// output (the `memory` input), the MLP. Its dropout sites keep the numbering this layer has
// always drawn (self-attention 0-1, MLP 2, cross-attention 3-4), so the masks stay the same.
LayerSpec decoder_layer_spec(AttentionMask mask = AttentionMask::causal_padding);

}  // namespace megatron::nn
