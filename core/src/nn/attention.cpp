// Self-attention forward and backward over Megatron's (S, B, ...) activation layout.
#include "megatron/nn/attention.h"

#include <cmath>

namespace megatron::nn {

namespace {

// (S, B, H, D) -> the (B, S, H, D) view the attention and rotary ops take.
Tensor bshd(const Tensor& t) {
  return t.permute({1, 0, 2, 3});
}

}  // namespace

void SelfAttention::declare(ParamFactory& factory, const std::string& prefix,
                            const TransformerConfig& config) {
  config_ = config;
  qkv = Linear::declare(factory, prefix + ".linear_qkv", config.hidden_size, config.qkv_size(),
                        config.add_qkv_bias || config.add_bias_linear, config.init_method_std,
                        TensorParallel::column);
  proj = Linear::declare(factory, prefix + ".linear_proj",
                         config.num_attention_heads * config.kv_channels, config.hidden_size,
                         config.add_bias_linear, config.output_init_std(), TensorParallel::row);
}

AttentionParams SelfAttention::params(const LayerContext& ctx, std::uint64_t dropout_site) const {
  AttentionParams p;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.kv_channels)));
  p.causal = true;
  p.dropout_p = ctx.training ? config_.attention_dropout : 0.0f;
  p.seed = ctx.seed;
  p.offset = ctx.dropout_offset(dropout_site);
  return p;
}

void SelfAttention::forward(const LayerContext& ctx, const Tensor& x, const RotaryTables* rotary,
                            std::uint64_t dropout_site, Tensor& y, Saved& saved) const {
  Backend& be = ctx.backend;
  const std::int64_t s = x.size(0), b = x.size(1), h = x.size(2), rows = s * b;
  const std::int64_t np = config_.num_attention_heads, ng = config_.num_query_groups;
  const std::int64_t r = config_.heads_per_group(), hn = config_.kv_channels;
  const DType dt = x.dtype();

  Tensor mixed = be.empty({s, b, config_.qkv_size()}, dt);
  Tensor mixed_rows = mixed.view({rows, config_.qkv_size()});
  qkv.forward(be, x.view({rows, h}), mixed_rows, ctx.compute);

  // Per query group: r query heads, then one key head, then one value head.
  const Tensor grouped = mixed.unflatten(2, ng, (r + 2) * hn);
  Tensor q = be.empty({s, b, ng, r, hn}, dt);
  be.copy(grouped.slice(3, 0, r * hn).unflatten(3, r, hn), q);
  saved.q = q.view({s, b, np, hn});
  saved.k = be.empty({s, b, ng, hn}, dt);
  be.copy(grouped.slice(3, r * hn, hn), saved.k);
  saved.v = be.empty({s, b, ng, hn}, dt);
  be.copy(grouped.slice(3, (r + 1) * hn, hn), saved.v);
  if (rotary) {
    Tensor q4 = bshd(saved.q), k4 = bshd(saved.k);
    be.rotary_forward(q4, rotary->cos, rotary->sin, q4);
    be.rotary_forward(k4, rotary->cos, rotary->sin, k4);
  }

  saved.out = be.empty({s, b, np, hn}, dt);
  saved.lse = be.empty({b, np, s}, dt == DType::f64 ? DType::f64 : DType::f32);
  Tensor out4 = bshd(saved.out);
  be.attention_forward(bshd(saved.q), bshd(saved.k), bshd(saved.v), params(ctx, dropout_site), out4,
                       saved.lse);
  Tensor y_rows = y.view({rows, h});
  proj.forward(be, saved.out.view({rows, np * hn}), y_rows, ctx.compute);
}

void SelfAttention::backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                             const RotaryTables* rotary, std::uint64_t dropout_site,
                             const Saved& saved, Tensor& dx) const {
  Backend& be = ctx.backend;
  const std::int64_t s = x.size(0), b = x.size(1), h = x.size(2), rows = s * b;
  const std::int64_t np = config_.num_attention_heads, ng = config_.num_query_groups;
  const std::int64_t r = config_.heads_per_group(), hn = config_.kv_channels;
  const DType dt = x.dtype();

  Tensor dctx = be.empty({s, b, np, hn}, dt);
  Tensor dctx_rows = dctx.view({rows, np * hn});
  proj.backward(be, saved.out.view({rows, np * hn}), dy.view({rows, h}), &dctx_rows, ctx.compute);

  Tensor dq = be.empty({s, b, np, hn}, dt), dk = be.empty({s, b, ng, hn}, dt),
         dv = be.empty({s, b, ng, hn}, dt);
  Tensor dq4 = bshd(dq), dk4 = bshd(dk), dv4 = bshd(dv);
  be.attention_backward(bshd(dctx), bshd(saved.q), bshd(saved.k), bshd(saved.v), bshd(saved.out),
                        saved.lse, params(ctx, dropout_site), dq4, dk4, dv4);
  if (rotary) {
    be.rotary_backward(dq4, rotary->cos, rotary->sin, dq4);
    be.rotary_backward(dk4, rotary->cos, rotary->sin, dk4);
  }

  Tensor dmixed = be.empty({s, b, config_.qkv_size()}, dt);
  const Tensor grouped = dmixed.unflatten(2, ng, (r + 2) * hn);
  Tensor dq_dst = grouped.slice(3, 0, r * hn).unflatten(3, r, hn);
  Tensor dk_dst = grouped.slice(3, r * hn, hn), dv_dst = grouped.slice(3, (r + 1) * hn, hn);
  be.copy(dq.view({s, b, ng, r, hn}), dq_dst);
  be.copy(dk, dk_dst);
  be.copy(dv, dv_dst);
  Tensor dx_rows = dx.view({rows, h});
  qkv.backward(be, x.view({rows, h}), dmixed.view({rows, config_.qkv_size()}), &dx_rows,
               ctx.compute);
}

}  // namespace megatron::nn
