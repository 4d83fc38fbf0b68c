// Cross-attention forward and backward over Megatron's (S, B, ...) activation layout.
#include "megatron/nn/cross_attention.h"

#include <cmath>
#include <string>

#include "megatron/error.h"

namespace megatron::nn {

namespace {

// (S, B, H, D) -> the (B, S, H, D) view the attention op takes.
Tensor bshd(const Tensor& t) {
  return t.permute({1, 0, 2, 3});
}

}  // namespace

void CrossAttention::declare(ParamFactory& factory, const std::string& prefix,
                             const TransformerConfig& config) {
  config_ = config;
  tp_ = factory.tp;
  if (config.num_query_groups != config.num_attention_heads) {
    throw ConfigError("num_query_groups (" + std::to_string(config.num_query_groups) +
                      ") must equal num_attention_heads (" +
                      std::to_string(config.num_attention_heads) + ") in " + prefix +
                      ": grouped-query attention is not supported in cross-attention");
  }
  if (config.num_attention_heads % tp_.size != 0) {
    throw ConfigError("num_attention_heads (" + std::to_string(config.num_attention_heads) +
                      ") must be divisible by tensor_model_parallel_size (" +
                      std::to_string(tp_.size) +
                      "): each tensor-parallel rank computes whole attention heads");
  }
  heads_ = config.num_attention_heads / tp_.size;
  const std::int64_t projection = config.num_attention_heads * config.kv_channels;
  const bool bias = config.add_bias_linear;
  linear_q = Linear::declare(factory, prefix + ".linear_q", config.hidden_size, projection, bias,
                             config.init_method_std, TensorParallel::column);
  // Per head [key | value]: a column split of whole heads keeps each head's pair together.
  linear_kv = Linear::declare(factory, prefix + ".linear_kv", config.hidden_size, 2 * projection,
                              bias, config.init_method_std, TensorParallel::column);
  linear_proj = Linear::declare(factory, prefix + ".linear_proj", projection, config.hidden_size,
                                bias, config.output_init_std(), TensorParallel::row);
}

void CrossAttention::check_shapes(const Tensor& x, const Tensor& memory,
                                  const LayerInputs& inputs) const {
  const Tensor mask = inputs.get(layer_input::memory_padding_mask);
  const auto fail = [&](const std::string& what) {
    throw Error("cross-attention: " + what + " (x " + shape_str(x.shape()) + ", memory " +
                (memory.defined() ? shape_str(memory.shape()) : std::string("undefined")) +
                ", memory padding mask " +
                (mask.defined() ? shape_str(mask.shape()) : std::string("undefined")) + ")");
  };
  if (!memory.defined()) fail("no encoder output (memory) given");
  if (x.dim() != 3 || memory.dim() != 3) fail("x and memory must be (S, B, hidden)");
  if (memory.size(1) != x.size(1)) fail("memory's batch differs from x's");
  if (memory.size(2) != config_.hidden_size || x.size(2) != config_.hidden_size)
    fail("hidden size differs from hidden_size " + std::to_string(config_.hidden_size));
  if (memory.dtype() != x.dtype()) fail("memory's dtype differs from x's");
  if (mask.defined() &&
      (mask.dim() != 2 || mask.size(0) != x.size(1) ||
       mask.size(1) != tp_full_rows(tp_, memory.size(0)) || mask.dtype() != DType::u8)) {
    fail("the memory padding mask must be u8 (batch, memory sequence)");
  }
}

AttentionParams CrossAttention::params(const LayerContext& ctx, const LayerInputs& inputs,
                                       std::uint64_t dropout_site, std::int64_t sq, std::int64_t sk,
                                       std::int64_t b) const {
  AttentionParams p;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.kv_channels)));
  p.causal = false;
  p.key_padding_mask = inputs.get(layer_input::memory_padding_mask);
  p.dropout_p = ctx.training ? config_.attention_dropout : 0.0f;
  p.seed = ctx.seed;
  // As in self-attention: each rank's probabilities (B, heads, Sq, Sk) take their own block of
  // the site's Philox range.
  p.offset =
      ctx.dropout_offset(dropout_site) +
      static_cast<std::uint64_t>(tp_.rank) * static_cast<std::uint64_t>(b * heads_ * sq * sk);
  return p;
}

void CrossAttention::forward(const LayerContext& ctx, const Tensor& x, const Tensor& memory,
                             const LayerInputs& inputs, std::uint64_t dropout_site, Tensor& y,
                             Saved& saved) const {
  check_shapes(x, memory, inputs);
  Backend& be = ctx.backend;
  const std::int64_t b = x.size(1), h = x.size(2);
  const std::int64_t sq_in = x.size(0), sk_in = memory.size(0);
  const std::int64_t sq = tp_full_rows(tp_, sq_in), sk = tp_full_rows(tp_, sk_in);
  const std::int64_t np = heads_, hn = config_.kv_channels;
  const DType dt = x.dtype();

  saved.q = be.empty({sq, b, np, hn}, dt);
  Tensor q_rows = saved.q.view({sq * b, np * hn});
  linear_q.forward(be, x.view({sq_in * b, h}), q_rows, ctx.compute);

  Tensor mixed = be.empty({sk, b, 2 * np * hn}, dt);
  Tensor mixed_rows = mixed.view({sk * b, 2 * np * hn});
  linear_kv.forward(be, memory.view({sk_in * b, h}), mixed_rows, ctx.compute);
  const Tensor per_head = mixed.unflatten(2, np, 2 * hn);
  saved.k = be.empty({sk, b, np, hn}, dt);
  be.copy(per_head.slice(3, 0, hn), saved.k);
  saved.v = be.empty({sk, b, np, hn}, dt);
  be.copy(per_head.slice(3, hn, hn), saved.v);

  saved.out = be.empty({sq, b, np, hn}, dt);
  saved.lse = be.empty({b, np, sq}, dt == DType::f64 ? DType::f64 : DType::f32);
  Tensor out4 = bshd(saved.out);
  be.attention_forward(bshd(saved.q), bshd(saved.k), bshd(saved.v),
                       params(ctx, inputs, dropout_site, sq, sk, b), out4, saved.lse);
  Tensor y_rows = y.view({sq_in * b, h});
  linear_proj.forward(be, saved.out.view({sq * b, np * hn}), y_rows, ctx.compute);
}

void CrossAttention::backward(const LayerContext& ctx, const Tensor& x, const Tensor& memory,
                              const Tensor& dy, const LayerInputs& inputs,
                              std::uint64_t dropout_site, const Saved& saved, Tensor& dx,
                              Tensor& dmemory_accumulate) const {
  check_shapes(x, memory, inputs);
  if (dmemory_accumulate.shape() != memory.shape()) {
    throw Error("cross-attention backward: the memory gradient " +
                shape_str(dmemory_accumulate.shape()) + " is not shaped as memory " +
                shape_str(memory.shape()));
  }
  Backend& be = ctx.backend;
  const std::int64_t b = x.size(1), h = x.size(2);
  const std::int64_t sq_in = x.size(0), sk_in = memory.size(0);
  const std::int64_t sq = tp_full_rows(tp_, sq_in), sk = tp_full_rows(tp_, sk_in);
  const std::int64_t np = heads_, hn = config_.kv_channels;
  const DType dt = x.dtype();

  Tensor dctx = be.empty({sq, b, np, hn}, dt);
  Tensor dctx_rows = dctx.view({sq * b, np * hn});
  linear_proj.backward(be, saved.out.view({sq * b, np * hn}), dy.view({sq_in * b, h}), &dctx_rows,
                       ctx.compute);

  Tensor dq = be.empty({sq, b, np, hn}, dt);
  Tensor dmixed = be.empty({sk, b, 2 * np * hn}, dt);
  Tensor dk = be.empty({sk, b, np, hn}, dt), dv = be.empty({sk, b, np, hn}, dt);
  Tensor dq4 = bshd(dq), dk4 = bshd(dk), dv4 = bshd(dv);
  be.attention_backward(bshd(dctx), bshd(saved.q), bshd(saved.k), bshd(saved.v), bshd(saved.out),
                        saved.lse, params(ctx, inputs, dropout_site, sq, sk, b), dq4, dk4, dv4);
  const Tensor per_head = dmixed.unflatten(2, np, 2 * hn);
  Tensor dk_dst = per_head.slice(3, 0, hn), dv_dst = per_head.slice(3, hn, hn);
  be.copy(dk, dk_dst);
  be.copy(dv, dv_dst);

  Tensor dx_rows = dx.view({sq_in * b, h});
  linear_q.backward(be, x.view({sq_in * b, h}), dq.view({sq * b, np * hn}), &dx_rows, ctx.compute);
  Tensor dmemory = be.empty(memory.shape(), dt);
  Tensor dmemory_rows = dmemory.view({sk_in * b, h});
  linear_kv.backward(be, memory.view({sk_in * b, h}), dmixed.view({sk * b, 2 * np * hn}),
                     &dmemory_rows, ctx.compute);
  be.add(dmemory_accumulate, dmemory, dmemory_accumulate);
}

}  // namespace megatron::nn
