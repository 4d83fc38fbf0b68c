// Self-attention forward and backward over Megatron's (S, B, ...) activation layout; under context
// parallelism over this rank's chunks of the sequence, with ring attention.
#include "megatron/nn/attention.h"

#include <cmath>
#include <string>

#include "megatron/error.h"
#include "megatron/nn/ring_attention.h"

namespace megatron::nn {

namespace {

// (S, B, H, D) -> the (B, S, H, D) view the attention and rotary ops take.
Tensor bshd(const Tensor& t) {
  return t.permute({1, 0, 2, 3});
}

}  // namespace

void SelfAttention::declare(ParamFactory& factory, const std::string& prefix,
                            const TransformerConfig& config, AttentionMask mask) {
  config_ = config;
  mask_ = mask;
  tp_ = factory.tp;
  const std::int64_t t = tp_.size;
  if (config.num_attention_heads % t != 0) {
    throw ConfigError("num_attention_heads (" + std::to_string(config.num_attention_heads) +
                      ") must be divisible by tensor_model_parallel_size (" + std::to_string(t) +
                      "): each tensor-parallel rank computes whole attention heads");
  }
  if (config.num_query_groups % t != 0) {
    throw ConfigError("num_query_groups (" + std::to_string(config.num_query_groups) +
                      ") must be divisible by tensor_model_parallel_size (" + std::to_string(t) +
                      "): each tensor-parallel rank holds whole query groups with their keys "
                      "and values");
  }
  heads_ = config.num_attention_heads / t;
  groups_ = config.num_query_groups / t;
  // The per-query-group layout puts whole groups in each slice of linear_qkv's rows.
  qkv_local_ = config.qkv_size() / t;
  qkv = Linear::declare(factory, prefix + ".linear_qkv", config.hidden_size, config.qkv_size(),
                        config.add_qkv_bias || config.add_bias_linear, config.init_method_std,
                        TensorParallel::column);
  proj = Linear::declare(factory, prefix + ".linear_proj",
                         config.num_attention_heads * config.kv_channels, config.hidden_size,
                         config.add_bias_linear, config.output_init_std(), TensorParallel::row);
}

void SelfAttention::split_heads(Backend& be, const Tensor& mixed, const Tensor& cos,
                                const Tensor& sin, Tensor& q, Tensor& k, Tensor& v) const {
  const std::int64_t s = mixed.size(0), b = mixed.size(1);
  const std::int64_t np = heads_, ng = groups_;
  const std::int64_t r = config_.heads_per_group(), hn = config_.kv_channels;
  const DType dt = mixed.dtype();
  // Per query group: r query heads, then one key head, then one value head.
  const Tensor grouped = mixed.unflatten(2, ng, (r + 2) * hn);
  Tensor q5 = be.empty({s, b, ng, r, hn}, dt);
  be.copy(grouped.slice(3, 0, r * hn).unflatten(3, r, hn), q5);
  q = q5.view({s, b, np, hn});
  k = be.empty({s, b, ng, hn}, dt);
  be.copy(grouped.slice(3, r * hn, hn), k);
  v = be.empty({s, b, ng, hn}, dt);
  be.copy(grouped.slice(3, (r + 1) * hn, hn), v);
  if (cos.defined()) {
    Tensor q4 = bshd(q), k4 = bshd(k);
    be.rotary_forward(q4, cos, sin, q4);
    be.rotary_forward(k4, cos, sin, k4);
  }
}

SelfAttention::KvCache SelfAttention::start_cache(Backend& be, std::int64_t batch,
                                                  std::int64_t max_tokens, DType dtype) const {
  if (mask_ != AttentionMask::causal) {
    throw Error("self-attention: incremental decoding needs the causal mask");
  }
  return {be.empty({max_tokens, batch, groups_, config_.kv_channels}, dtype),
          be.empty({max_tokens, batch, groups_, config_.kv_channels}, dtype)};
}

void SelfAttention::forward_cached(const LayerContext& ctx, const Tensor& x,
                                   const LayerInputs& inputs, KvCache& cache, std::int64_t past,
                                   Tensor& y) const {
  Backend& be = ctx.backend;
  const std::int64_t s = x.size(0), b = x.size(1), h = x.size(2), rows = s * b;
  const std::int64_t np = heads_, hn = config_.kv_channels, keys = past + s;
  if (tp_.sp()) throw Error("self-attention: incremental decoding without sequence parallelism");
  if (keys > cache.k.size(0) || cache.k.size(1) != b) {
    throw Error("self-attention: " + std::to_string(keys) + " positions of " + std::to_string(b) +
                " sequences in a decoding cache of " + shape_str(cache.k.shape()));
  }
  Tensor mixed = be.empty({s, b, qkv_local_}, x.dtype());
  Tensor mixed_rows = mixed.view({rows, qkv_local_});
  qkv.forward(be, x.view({rows, h}), mixed_rows, ctx.compute);
  Tensor q, k, v;
  split_heads(be, mixed, inputs.get(layer_input::rotary_cos), inputs.get(layer_input::rotary_sin),
              q, k, v);
  Tensor k_slot = cache.k.slice(0, past, s), v_slot = cache.v.slice(0, past, s);
  be.copy(k, k_slot);
  be.copy(v, v_slot);

  AttentionParams p;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hn)));
  p.causal = true;  // bottom-right aligned: the new query i sees keys up to past + i
  Tensor out = be.empty({s, b, np, hn}, x.dtype());
  Tensor lse = be.empty({b, np, s}, x.dtype() == DType::f64 ? DType::f64 : DType::f32);
  Tensor out4 = bshd(out);
  be.attention_forward(bshd(q), bshd(cache.k.slice(0, 0, keys)), bshd(cache.v.slice(0, 0, keys)), p,
                       out4, lse);
  Tensor y_rows = y.view({rows, h});
  proj.forward(be, out.view({rows, np * hn}), y_rows, ctx.compute);
}

AttentionParams SelfAttention::params(const LayerContext& ctx, const LayerInputs& inputs,
                                      std::uint64_t dropout_site, std::int64_t s,
                                      std::int64_t b) const {
  AttentionParams p;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.kv_channels)));
  p.causal = mask_ == AttentionMask::causal || mask_ == AttentionMask::causal_padding;
  if (mask_ == AttentionMask::padding || mask_ == AttentionMask::causal_padding) {
    p.key_padding_mask =
        inputs.require(layer_input::key_padding_mask, "self-attention with a padding mask");
  }
  p.first_key = inputs.get(layer_input::first_key);
  p.bias = inputs.get(layer_input::attention_bias);
  p.dropout_p = ctx.training ? config_.attention_dropout : 0.0f;
  p.seed = ctx.seed;
  // Attention dropout is inside the tensor-parallel region: each rank's probabilities (B, heads,
  // S, S) take their own block of the site's Philox range (Megatron forks a per-rank RNG here).
  p.offset = ctx.dropout_offset(dropout_site) +
             static_cast<std::uint64_t>(tp_.rank) * static_cast<std::uint64_t>(b * heads_ * s * s);
  return p;
}

void SelfAttention::forward(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                            std::uint64_t dropout_site, Tensor& y, Saved& saved) const {
  const Tensor cos = inputs.get(layer_input::rotary_cos), sin = inputs.get(layer_input::rotary_sin);
  Backend& be = ctx.backend;
  const std::int64_t s_in = x.size(0), b = x.size(1), h = x.size(2), rows_in = s_in * b;
  const std::int64_t s = tp_full_rows(tp_, s_in), rows = s * b;
  const std::int64_t np = heads_, hn = config_.kv_channels;
  const DType dt = x.dtype();

  Tensor mixed = be.empty({s, b, qkv_local_}, dt);
  Tensor mixed_rows = mixed.view({rows, qkv_local_});
  qkv.forward(be, x.view({rows_in, h}), mixed_rows, ctx.compute);
  split_heads(be, mixed, cos, sin, saved.q, saved.k, saved.v);

  saved.out = be.empty({s, b, np, hn}, dt);
  saved.lse = be.empty({b, np, s}, dt == DType::f64 ? DType::f64 : DType::f32);
  Tensor out4 = bshd(saved.out);
  const AttentionParams p = params(ctx, inputs, dropout_site, s, b);
  if (ctx.context.split()) {  // this rank's chunks of the sequence, the others' keys round the ring
    ring_attention_forward(be, ctx.context, bshd(saved.q), bshd(saved.k), bshd(saved.v), p, out4,
                           saved.lse);
  } else {
    be.attention_forward(bshd(saved.q), bshd(saved.k), bshd(saved.v), p, out4, saved.lse);
  }
  Tensor y_rows = y.view({rows_in, h});
  proj.forward(be, saved.out.view({rows, np * hn}), y_rows, ctx.compute);
}

void SelfAttention::backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                             const LayerInputs& inputs, std::uint64_t dropout_site,
                             const Saved& saved, Tensor& dx) const {
  const Tensor cos = inputs.get(layer_input::rotary_cos), sin = inputs.get(layer_input::rotary_sin);
  Backend& be = ctx.backend;
  const std::int64_t s_in = x.size(0), b = x.size(1), h = x.size(2), rows_in = s_in * b;
  const std::int64_t s = tp_full_rows(tp_, s_in), rows = s * b;
  const std::int64_t np = heads_, ng = groups_;
  const std::int64_t r = config_.heads_per_group(), hn = config_.kv_channels;
  const DType dt = x.dtype();

  Tensor dctx = be.empty({s, b, np, hn}, dt);
  Tensor dctx_rows = dctx.view({rows, np * hn});
  proj.backward(be, saved.out.view({rows, np * hn}), dy.view({rows_in, h}), &dctx_rows,
                ctx.compute);

  Tensor dq = be.empty({s, b, np, hn}, dt), dk = be.empty({s, b, ng, hn}, dt),
         dv = be.empty({s, b, ng, hn}, dt);
  Tensor dq4 = bshd(dq), dk4 = bshd(dk), dv4 = bshd(dv);
  const Tensor bias = inputs.get(layer_input::attention_bias);
  Tensor dbias, dbias_sum;
  if (bias.defined()) {
    dbias_sum =
        inputs.gradient(layer_input::attention_bias, "self-attention with an attention bias");
    dbias = be.empty(bias.shape(), bias.dtype());
  }
  const AttentionParams p = params(ctx, inputs, dropout_site, s, b);
  if (ctx.context.split()) {
    ring_attention_backward(be, ctx.context, bshd(dctx), bshd(saved.q), bshd(saved.k),
                            bshd(saved.v), bshd(saved.out), saved.lse, p, dq4, dk4, dv4);
  } else {
    be.attention_backward(bshd(dctx), bshd(saved.q), bshd(saved.k), bshd(saved.v), bshd(saved.out),
                          saved.lse, p, dq4, dk4, dv4, dbias.defined() ? &dbias : nullptr);
  }
  if (dbias.defined()) be.axpy(1.0, dbias, dbias_sum);
  if (cos.defined()) {
    be.rotary_backward(dq4, cos, sin, dq4);
    be.rotary_backward(dk4, cos, sin, dk4);
  }

  Tensor dmixed = be.empty({s, b, qkv_local_}, dt);
  const Tensor grouped = dmixed.unflatten(2, ng, (r + 2) * hn);
  Tensor dq_dst = grouped.slice(3, 0, r * hn).unflatten(3, r, hn);
  Tensor dk_dst = grouped.slice(3, r * hn, hn), dv_dst = grouped.slice(3, (r + 1) * hn, hn);
  be.copy(dq.view({s, b, ng, r, hn}), dq_dst);
  be.copy(dk, dk_dst);
  be.copy(dv, dv_dst);
  Tensor dx_rows = dx.view({rows_in, h});
  qkv.backward(be, x.view({rows_in, h}), dmixed.view({rows, qkv_local_}), &dx_rows, ctx.compute);
}

}  // namespace megatron::nn
