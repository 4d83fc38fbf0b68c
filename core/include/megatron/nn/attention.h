// Megatron's self-attention: fused QKV projection laid out per query group, optional rotary
// embedding, fused causal or padding-masked attention (grouped-query) and the output projection.
// Under tensor parallelism each rank holds whole query groups (a column-parallel QKV and a
// row-parallel projection), so attention itself needs no communication.
#pragma once

#include <string>

#include "megatron/nn/layer_context.h"
#include "megatron/nn/layer_inputs.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

// Which keys a query of self-attention sees.
enum class AttentionMask {
  causal,          // keys up to the query's own position (GPT)
  padding,         // every key but the sample's padding (BERT, T5's encoder): bidirectional
  causal_padding,  // keys up to the query's own position that are not padding (T5's decoder)
};

class SelfAttention {
 public:
  // S is the full sequence and heads/groups this rank's, also under sequence parallelism.
  struct Saved {
    Tensor q, k, v;  // (S, B, heads, hn) after rotary, contiguous
    Tensor out;      // (S, B, heads, hn)
    Tensor lse;      // (B, heads, S)
  };

  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config,
               AttentionMask mask = AttentionMask::causal);

  // Throws ConfigError unless the factory's tensor-parallel size divides the heads and groups.
  // x (S, B, h) -> y (S, B, h): the projection output with its bias, before dropout. Under
  // sequence parallelism both are (S / tp, B, h) sequence shards.
  // `dropout_site` seeds the attention-probability dropout.
  void forward(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
               std::uint64_t dropout_site, Tensor& y, Saved& saved) const;
  // dx (S, B, h) overwritten; parameter gradients accumulated.
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const LayerInputs& inputs, std::uint64_t dropout_site, const Saved& saved,
                Tensor& dx) const;

  // Incremental decoding (causal masks only): keys and values of this rank's query groups for
  // up to max_tokens positions, (max_tokens, B, groups, hn) each.
  struct KvCache {
    Tensor k, v;
  };
  KvCache start_cache(Backend& backend, std::int64_t batch, std::int64_t max_tokens,
                      DType dtype) const;
  // Evaluation mode: x (S_new, B, h) the tokens at positions past ... past + S_new - 1 (the
  // rotary tables in `inputs` are those positions'), their keys and values written into the
  // cache, each query attending causally to the cache's past + S_new keys; y as forward's.
  void forward_cached(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                      KvCache& cache, std::int64_t past, Tensor& y) const;

  Linear qkv, proj;

 private:
  // The fused projection (S, B, qkv) -> q (S, B, heads, hn), k and v (S, B, groups, hn),
  // contiguous, rotated by cos / sin when defined.
  void split_heads(Backend& be, const Tensor& mixed, const Tensor& cos, const Tensor& sin,
                   Tensor& q, Tensor& k, Tensor& v) const;
  AttentionParams params(const LayerContext& ctx, const LayerInputs& inputs,
                         std::uint64_t dropout_site, std::int64_t s, std::int64_t b) const;
  TransformerConfig config_;
  AttentionMask mask_ = AttentionMask::causal;
  TensorParallelism tp_;
  std::int64_t heads_ = 0, groups_ = 0;  // this rank's
  std::int64_t qkv_local_ = 0;           // this rank's linear_qkv output features
};

}  // namespace megatron::nn
