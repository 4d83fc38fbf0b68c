// The core's block kinds as Mixers over SelfAttention, CrossAttention, Mlp and MambaMixer, and
// the block specs of Megatron-core's layers.
#include "megatron/nn/core_blocks.h"

namespace megatron::nn {

namespace {

template <typename Inner>
struct SavedAs : Mixer::Saved {
  Inner inner;
};

template <typename Inner>
Inner& saved_as(Mixer::Saved& saved) {
  return static_cast<SavedAs<Inner>&>(saved).inner;
}

}  // namespace

void SelfAttentionBlock::declare(ParamFactory& factory, const std::string& prefix,
                                 const TransformerConfig& config) {
  attention.declare(factory, prefix, config, mask_);
}

std::unique_ptr<Mixer::Saved> SelfAttentionBlock::forward(const LayerContext& ctx, const Tensor& x,
                                                          const LayerInputs& inputs,
                                                          std::uint64_t first_site,
                                                          Tensor& y) const {
  auto saved = std::make_unique<SavedAs<SelfAttention::Saved>>();
  attention.forward(ctx, x, inputs, first_site, y, saved->inner);
  return saved;
}

void SelfAttentionBlock::backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                                  const LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                                  Tensor& dx) const {
  attention.backward(ctx, x, dy, inputs, first_site, saved_as<SelfAttention::Saved>(saved), dx);
}

namespace {
struct KvCacheOf : Mixer::Cache {
  SelfAttention::KvCache kv;
};
}  // namespace

std::unique_ptr<Mixer::Cache> SelfAttentionBlock::start_cache(Backend& backend, std::int64_t batch,
                                                              std::int64_t max_tokens,
                                                              DType dtype) const {
  auto cache = std::make_unique<KvCacheOf>();
  cache->kv = attention.start_cache(backend, batch, max_tokens, dtype);
  return cache;
}

void SelfAttentionBlock::forward_cached(const LayerContext& ctx, const Tensor& x,
                                        const LayerInputs& inputs, Cache& cache, std::int64_t past,
                                        Tensor& y) const {
  attention.forward_cached(ctx, x, inputs, static_cast<KvCacheOf&>(cache).kv, past, y);
}

void CrossAttentionBlock::declare(ParamFactory& factory, const std::string& prefix,
                                  const TransformerConfig& config) {
  attention.declare(factory, prefix, config);
}

std::unique_ptr<Mixer::Saved> CrossAttentionBlock::forward(const LayerContext& ctx, const Tensor& x,
                                                           const LayerInputs& inputs,
                                                           std::uint64_t first_site,
                                                           Tensor& y) const {
  auto saved = std::make_unique<SavedAs<CrossAttention::Saved>>();
  attention.forward(ctx, x, inputs.get(layer_input::memory), inputs, first_site, y, saved->inner);
  return saved;
}

void CrossAttentionBlock::backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                                   const LayerInputs& inputs, std::uint64_t first_site,
                                   Saved& saved, Tensor& dx) const {
  Tensor dmemory = inputs.gradient(layer_input::memory, "cross-attention backward");
  attention.backward(ctx, x, inputs.get(layer_input::memory), dy, inputs, first_site,
                     saved_as<CrossAttention::Saved>(saved), dx, dmemory);
}

void MlpBlock::declare(ParamFactory& factory, const std::string& prefix,
                       const TransformerConfig& config) {
  mlp.declare(factory, prefix, config);
}

std::unique_ptr<Mixer::Saved> MlpBlock::forward(const LayerContext& ctx, const Tensor& x,
                                                const LayerInputs&, std::uint64_t,
                                                Tensor& y) const {
  auto saved = std::make_unique<SavedAs<Mlp::Saved>>();
  Tensor y_rows = rows_of(y);
  mlp.forward(ctx, rows_of(x), y_rows, saved->inner);
  return saved;
}

void MlpBlock::backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                        const LayerInputs&, std::uint64_t, Saved& saved, Tensor& dx) const {
  Tensor dx_rows = rows_of(dx);
  mlp.backward(ctx, rows_of(x), rows_of(dy), saved_as<Mlp::Saved>(saved), dx_rows);
}

void MambaBlock::declare(ParamFactory& factory, const std::string& prefix,
                         const TransformerConfig& config) {
  mixer.declare(factory, prefix, config);
}

std::unique_ptr<Mixer::Saved> MambaBlock::forward(const LayerContext& ctx, const Tensor& x,
                                                  const LayerInputs&, std::uint64_t,
                                                  Tensor& y) const {
  auto saved = std::make_unique<SavedAs<MambaMixer::Saved>>();
  Tensor y_rows = rows_of(y);
  mixer.forward(ctx, rows_of(x), x.size(1), y_rows, saved->inner);
  return saved;
}

void MambaBlock::backward(const LayerContext& ctx, const Tensor&, const Tensor& dy,
                          const LayerInputs&, std::uint64_t, Saved& saved, Tensor& dx) const {
  Tensor dx_rows = rows_of(dx);
  mixer.backward(ctx, rows_of(dy), saved_as<MambaMixer::Saved>(saved), dx_rows);
}

namespace {
struct MambaCache : Mixer::Cache {
  MambaMixer::DecodeState state;
};
}  // namespace

std::unique_ptr<Mixer::Cache> MambaBlock::start_cache(Backend& backend, std::int64_t batch,
                                                      std::int64_t, DType dtype) const {
  auto cache = std::make_unique<MambaCache>();
  cache->state = mixer.start_decoding(backend, batch, dtype);
  return cache;
}

void MambaBlock::forward_cached(const LayerContext& ctx, const Tensor& x, const LayerInputs&,
                                Cache& cache, std::int64_t, Tensor& y) const {
  Tensor y_rows = rows_of(y);
  mixer.forward_decoding(ctx, rows_of(x), x.size(1), static_cast<MambaCache&>(cache).state, y_rows);
}

BlockSpec self_attention_block(AttentionMask mask, NormNames names) {
  const bool fused = names == NormNames::fused;
  return {"self_attention",
          {fused ? "self_attention.linear_qkv" : "input_layernorm", fused},
          [mask] { return std::make_unique<SelfAttentionBlock>(mask); },
          {}};
}

BlockSpec cross_attention_block() {
  return {"cross_attention",
          {"pre_cross_attn_layernorm", false},
          [] { return std::make_unique<CrossAttentionBlock>(); },
          {}};
}

BlockSpec mlp_block(NormNames names) {
  const bool fused = names == NormNames::fused;
  return {"mlp",
          {fused ? "mlp.linear_fc1" : "pre_mlp_layernorm", fused},
          [] { return std::make_unique<MlpBlock>(); },
          {}};
}

BlockSpec mamba_block(NormNames names) {
  const bool fused = names == NormNames::fused;
  return {"mixer",
          {fused ? "mixer.in_proj" : "norm", fused},
          [] { return std::make_unique<MambaBlock>(); },
          {}};
}

LayerSpec transformer_layer_spec(AttentionMask mask) {
  return {{self_attention_block(mask), mlp_block()}};
}

LayerSpec decoder_layer_spec(AttentionMask mask) {
  LayerSpec spec{{self_attention_block(mask), cross_attention_block(), mlp_block()}};
  spec.blocks[1].first_site = 3;
  spec.blocks[2].first_site = 2;
  return spec;
}

}  // namespace megatron::nn
