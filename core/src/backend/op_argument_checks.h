// Whole-op argument rules that both backends enforce, each passing its own device, so the CPU and
// CUDA ops accept and refuse exactly the same calls with the same messages.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "backend/op_checks.h"
#include "megatron/backend/backend.h"

namespace megatron::ops {

// rotary_forward/backward: x and y (B, S, H, D), last dimension contiguous; cos and sin
// (S, rotary_dim) of x's dtype with an even rotary_dim <= D.
inline void check_rotary_args(const char* op, const Tensor& x, const char* x_name,
                              const Tensor& cos, const Tensor& sin, const Tensor& y,
                              const char* y_name, Device device) {
  check_device(op, x_name, x, device);
  check_device(op, "cos", cos, device);
  check_device(op, "sin", sin, device);
  check_device(op, y_name, y, device);
  check_rank(op, x_name, x, 4);
  check_same_shape(op, y_name, y, x_name, x);
  check_same_dtype(op, y_name, y, x_name, x);
  check_last_dim_contiguous(op, x_name, x);
  check_last_dim_contiguous(op, y_name, y);
  check_rank(op, "cos", cos, 2);
  check_same_shape(op, "sin", sin, "cos", cos);
  check_same_dtype(op, "cos", cos, x_name, x);
  check_same_dtype(op, "sin", sin, x_name, x);
  check_last_dim_contiguous(op, "cos", cos);
  check_last_dim_contiguous(op, "sin", sin);
  const std::int64_t seq = x.size(1), head_dim = x.size(3), rotary_dim = cos.size(1);
  if (cos.size(0) != seq) {
    fail(op, "cos " + cos.describe() + " must have " + std::to_string(seq) +
                 " rows (the sequence length of " + x_name + " " + x.describe() + ")");
  }
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    fail(op, "the rotary dimension (cos.size(1) = " + std::to_string(rotary_dim) +
                 ") must be even and at most the head dimension " + std::to_string(head_dim));
  }
}

// softmax_forward: x and y f32/f64 (B, H, Sq, Sk) of one shape and dtype; the optional mask u8
// (B or 1, 1, Sq, Sk).
inline void check_softmax_args(const char* op, const Tensor& x, const Tensor* mask, const Tensor& y,
                               Device device) {
  check_device(op, "x", x, device);
  check_dtype(op, "x", x, {DType::f32, DType::f64});
  check_rank(op, "x", x, 4);
  check_device(op, "y", y, device);
  check_dtype(op, "y", y, {DType::f32, DType::f64});
  check_same_dtype(op, "y", y, "x", x);
  check_same_shape(op, "y", y, "x", x);
  if (!mask) return;
  check_device(op, "mask", *mask, device);
  check_dtype(op, "mask", *mask, {DType::u8});
  check_rank(op, "mask", *mask, 4);
  const Shape& s = x.shape();
  if (!(mask->size(0) == s[0] || mask->size(0) == 1) || mask->size(1) != 1 ||
      mask->size(2) != s[2] || mask->size(3) != s[3]) {
    fail(op, "mask must have shape [" + std::to_string(s[0]) + " or 1, 1, " + std::to_string(s[2]) +
                 ", " + std::to_string(s[3]) + "], got " + mask->describe());
  }
}

// Attention tensors are (B, S, H, D) views with a contiguous last dimension.
struct AttentionShapes {
  std::int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
};

// A (B, S, H, D) tensor `name` on `device` of q's dtype.
inline void check_attention_bshd(const char* op, const char* name, const Tensor& t, const Tensor& q,
                                 Device device) {
  check_rank(op, name, t, 4);
  check_device(op, name, t, device);
  check_same_dtype(op, name, t, "q", q);
  check_last_dim_contiguous(op, name, t);
}

// attention_merge's arguments: out, part_out (B, S, H, D) of one float dtype on `device`, lse and
// part_lse (B, H, S) of the same dtype.
inline void check_attention_merge(const char* op, const Tensor& out, const Tensor& lse,
                                  const Tensor& part_out, const Tensor& part_lse, Device device) {
  check_dtype(op, "out", out, {DType::f32, DType::f64});
  check_attention_bshd(op, "out", out, out, device);
  check_attention_bshd(op, "part_out", part_out, out, device);
  check_same_shape(op, "part_out", part_out, "out", out);
  const Shape bhs{out.size(0), out.size(2), out.size(1)};
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"lse", &lse}, {"part_lse", &part_lse}}) {
    check_device(op, name, *t, device);
    check_same_dtype(op, name, *t, "out", out);
    check_shape(op, name, *t, bhs);
  }
}

// params.key_padding_mask, when given: (B, Sk) u8, contiguous, on `device`.
inline void check_key_padding_mask(const char* op, const Tensor& mask, const AttentionShapes& s,
                                   Device device) {
  constexpr const char* name = "key_padding_mask";
  check_device(op, name, mask, device);
  check_dtype(op, name, mask, {DType::u8});
  if (mask.dim() != 2 || mask.size(0) != s.batch || mask.size(1) != s.seq_k) {
    fail(op, std::string(name) + " must have shape [" + std::to_string(s.batch) + ", " +
                 std::to_string(s.seq_k) + "] (batch of q, keys of k), got " + mask.describe());
  }
  check_contiguous(op, name, mask);
}

// params.first_key, when given: (B, Sq) i32, contiguous, on `device`.
inline void check_first_key(const char* op, const Tensor& first, const AttentionShapes& s,
                            Device device) {
  constexpr const char* name = "first_key";
  check_device(op, name, first, device);
  check_dtype(op, name, first, {DType::i32});
  if (first.dim() != 2 || first.size(0) != s.batch || first.size(1) != s.seq_q) {
    fail(op, std::string(name) + " must have shape [" + std::to_string(s.batch) + ", " +
                 std::to_string(s.seq_q) + "] (batch of q, queries of q), got " + first.describe());
  }
  check_contiguous(op, name, first);
}

// params.bias, when given: (Hq, Sq, Sk) of q's dtype, contiguous, on `device`; `what` names it.
inline void check_score_bias(const char* op, const char* what, const Tensor& bias, const Tensor& q,
                             const AttentionShapes& s, Device device) {
  check_device(op, what, bias, device);
  check_same_dtype(op, what, bias, "q", q);
  if (bias.dim() != 3 || bias.size(0) != s.heads_q || bias.size(1) != s.seq_q ||
      bias.size(2) != s.seq_k) {
    fail(op, std::string(what) + " must have shape [" + std::to_string(s.heads_q) + ", " +
                 std::to_string(s.seq_q) + ", " + std::to_string(s.seq_k) +
                 "] (heads of q, queries, keys), got " + bias.describe());
  }
  check_contiguous(op, what, bias);
}

// attention_backward's dbias, when given: needs params.bias and has its shape.
inline void check_bias_grad(const char* op, const Tensor* dbias, const AttentionParams& params,
                            const Tensor& q, const AttentionShapes& s, Device device) {
  if (!dbias) return;
  if (!params.bias.defined()) fail(op, "dbias was given but params.bias was not");
  check_score_bias(op, "dbias", *dbias, q, s, device);
}

// q (B, Sq, Hq, D) f32/f64, k and v (B, Sk, Hkv, D) with Hq a multiple of Hkv, a finite scale,
// dropout_p in [0, 1), an optional key padding mask and first keys; returns the sizes.
inline AttentionShapes check_attention_args(const char* op, const Tensor& q, const Tensor& k,
                                            const Tensor& v, const AttentionParams& params,
                                            Device device) {
  check_rank(op, "q", q, 4);
  check_device(op, "q", q, device);
  check_dtype(op, "q", q, {DType::f32, DType::f64});
  check_last_dim_contiguous(op, "q", q);
  check_attention_bshd(op, "k", k, q, device);
  check_attention_bshd(op, "v", v, q, device);
  const AttentionShapes s{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  if (k.size(0) != s.batch || k.size(3) != s.head_dim) {
    fail(op, "k must have shape (B=" + std::to_string(s.batch) +
                 ", Sk, Hkv, D=" + std::to_string(s.head_dim) + ") to match q " + q.describe() +
                 ", got " + k.describe());
  }
  check_same_shape(op, "v", v, "k", k);
  if (s.head_dim < 1) fail(op, "head dimension D must be at least 1, got " + q.describe());
  if (s.heads_kv < 1 || s.heads_q % s.heads_kv != 0) {
    fail(op, "query heads (" + std::to_string(s.heads_q) +
                 ") must be a multiple of key/value heads (" + std::to_string(s.heads_kv) +
                 "): q " + q.describe() + ", k " + k.describe());
  }
  if (!std::isfinite(params.scale)) {
    fail(op, "scale must be finite, got " + std::to_string(params.scale));
  }
  if (!(params.dropout_p >= 0.0f && params.dropout_p < 1.0f)) {
    fail(op, "dropout_p must be in [0, 1), got " + std::to_string(params.dropout_p));
  }
  if (params.key_padding_mask.defined()) {
    check_key_padding_mask(op, params.key_padding_mask, s, device);
  }
  if (params.first_key.defined()) check_first_key(op, params.first_key, s, device);
  if (params.bias.defined()) check_score_bias(op, "bias", params.bias, q, s, device);
  return s;
}

// A parameter-shaped optimizer tensor (grad or state) on `device` of param's dtype.
inline void check_optimizer_state(const char* op, const char* name, const Tensor& t,
                                  const Tensor& param, Device device) {
  check_device(op, name, t, device);
  check_same_shape(op, name, t, "param", param);
  check_same_dtype(op, name, t, "param", param);
}

inline void check_hyperparameter(const char* op, const char* name, double value, bool valid,
                                 const char* requirement) {
  if (!valid)
    fail(op, std::string(name) + " must be " + requirement + ", got " + std::to_string(value));
}

// adamw_step: tensors shaped like param on `device`, and the ranges torch.optim.AdamW accepts.
inline void check_adamw_args(const char* op, const Tensor& param, const Tensor& grad,
                             const Tensor& exp_avg, const Tensor& exp_avg_sq,
                             const AdamParams& params, Device device) {
  check_device(op, "param", param, device);
  check_optimizer_state(op, "grad", grad, param, device);
  check_optimizer_state(op, "exp_avg", exp_avg, param, device);
  check_optimizer_state(op, "exp_avg_sq", exp_avg_sq, param, device);
  check_hyperparameter(op, "lr", params.lr, params.lr >= 0, ">= 0");
  check_hyperparameter(op, "eps", params.eps, params.eps >= 0, ">= 0");
  check_hyperparameter(op, "beta1", params.beta1, params.beta1 >= 0 && params.beta1 < 1,
                       "in [0, 1)");
  check_hyperparameter(op, "beta2", params.beta2, params.beta2 >= 0 && params.beta2 < 1,
                       "in [0, 1)");
  check_hyperparameter(op, "weight_decay", params.weight_decay, params.weight_decay >= 0, ">= 0");
  if (params.step < 1) fail(op, "step must be >= 1 (1-based), got " + std::to_string(params.step));
}

// sgd_step: as torch.optim.SGD; momentum_buf is needed (and checked) only with momentum.
inline void check_sgd_args(const char* op, const Tensor& param, const Tensor& grad,
                           const Tensor* momentum_buf, const SgdParams& params, Device device) {
  check_device(op, "param", param, device);
  check_optimizer_state(op, "grad", grad, param, device);
  check_hyperparameter(op, "lr", params.lr, params.lr >= 0, ">= 0");
  check_hyperparameter(op, "momentum", params.momentum, params.momentum >= 0, ">= 0");
  check_hyperparameter(op, "weight_decay", params.weight_decay, params.weight_decay >= 0, ">= 0");
  if (params.nesterov && params.momentum == 0) {
    fail(op, "nesterov momentum requires momentum > 0 (as torch.optim.SGD)");
  }
  if (params.momentum == 0) return;
  if (momentum_buf == nullptr) {
    fail(op, "momentum_buf is null but momentum is " + std::to_string(params.momentum) +
                 " (pass a buffer zeroed before the first step)");
  }
  check_optimizer_state(op, "momentum_buf", *momentum_buf, param, device);
}

// ---- Mamba-2 ops -----------------------------------------------------------------------------

// A floating tensor (f32 or f64) on `device` with a contiguous last dimension, of `like`'s dtype.
inline void check_float_view(const char* op, const char* name, const Tensor& t, const Tensor& like,
                             const char* like_name, Device device) {
  check_device(op, name, t, device);
  check_dtype(op, name, t, {DType::f32, DType::f64});
  check_same_dtype(op, name, t, like_name, like);
  check_last_dim_contiguous(op, name, t);
}

// A parameter's gradient output (dweight, dbias): on `device`, shaped as the parameter, of x's
// dtype, contiguous.
inline void check_param_grad(const char* op, const char* name, const Tensor& grad,
                             const char* param_name, const Tensor& param, const Tensor& x,
                             Device device) {
  check_device(op, name, grad, device);
  check_same_shape(op, name, grad, param_name, param);
  check_same_dtype(op, name, grad, "x", x);
  check_contiguous(op, name, grad);
}

// causal_conv1d_silu_*: x and y (or dy, dx) (Bt, S, C); weight (C, K) with K >= 1, bias (C), both
// contiguous. `grads` holds the extra tensors of backward (dx, dy) checked like y.
inline void check_causal_conv1d_args(
    const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
    std::initializer_list<std::pair<const char*, const Tensor*>> like_x, Device device) {
  check_float_view(op, "x", x, x, "x", device);
  check_rank(op, "x", x, 3);
  check_float_view(op, "weight", weight, x, "x", device);
  check_rank(op, "weight", weight, 2);
  check_contiguous(op, "weight", weight);
  if (weight.size(0) != x.size(2) || weight.size(1) < 1) {
    fail(op, "weight " + weight.describe() +
                 " must be (channels, kernel) with channels = x.size(2) = " +
                 std::to_string(x.size(2)));
  }
  check_float_view(op, "bias", bias, x, "x", device);
  check_shape(op, "bias", bias, {x.size(2)});
  check_contiguous(op, "bias", bias);
  for (const auto& [name, t] : like_x) {
    check_float_view(op, name, *t, x, "x", device);
    check_same_shape(op, name, *t, "x", x);
  }
}

// ssd_scan_*: the scan's tensors (see Backend::SsdScan) and chunk_states.
// The scan's operands (ssd_scan_forward / backward / recurrent).
inline void check_ssd_scan_operands(const char* op, const Backend::SsdScan& s, Device device) {
  check_float_view(op, "x", s.x, s.x, "x", device);
  check_rank(op, "x", s.x, 4);
  const std::int64_t batch = s.x.size(0), seq = s.x.size(1), heads = s.x.size(2);
  check_float_view(op, "dt", s.dt, s.x, "x", device);
  check_shape(op, "dt", s.dt, {batch, seq, heads});
  check_float_view(op, "B", s.B, s.x, "x", device);
  check_rank(op, "B", s.B, 4);
  if (s.B.size(0) != batch || s.B.size(1) != seq) {
    fail(op, "B " + s.B.describe() + " must be (batch, seq, groups, state) with batch " +
                 std::to_string(batch) + " and seq " + std::to_string(seq) + " of x");
  }
  const std::int64_t groups = s.B.size(2);
  if (groups < 1 || heads % groups != 0) {
    fail(op, "the heads of x (" + std::to_string(heads) +
                 ") must be a multiple of the groups of B (" + std::to_string(groups) + ")");
  }
  check_float_view(op, "C", s.C, s.x, "x", device);
  check_same_shape(op, "C", s.C, "B", s.B);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"A_log", &s.A_log},
                                {"D", &s.D},
                                {"dt_bias", &s.dt_bias}}) {
    check_float_view(op, name, *t, s.x, "x", device);
    check_shape(op, name, *t, {heads});
    check_contiguous(op, name, *t);
  }
}

inline void check_ssd_scan_args(const char* op, const Backend::SsdScan& s,
                                const Tensor& chunk_states, Device device) {
  check_ssd_scan_operands(op, s, device);
  if (s.chunk_size < 1)
    fail(op, "chunk_size must be at least 1, got " + std::to_string(s.chunk_size));
  const std::int64_t chunks = (s.x.size(1) + s.chunk_size - 1) / s.chunk_size;
  check_float_view(op, "chunk_states", chunk_states, s.x, "x", device);
  check_shape(op, "chunk_states", chunk_states,
              {s.x.size(0), chunks, s.x.size(2), s.x.size(3), s.B.size(3)});
  check_contiguous(op, "chunk_states", chunk_states);
}

// ssd_scan_recurrent's state (Bt, H, P, N), contiguous, of x's dtype.
inline void check_ssd_state(const char* op, const Backend::SsdScan& s, const Tensor& state,
                            Device device) {
  check_float_view(op, "state", state, s.x, "x", device);
  check_shape(op, "state", state, {s.x.size(0), s.x.size(2), s.x.size(3), s.B.size(3)});
  check_contiguous(op, "state", state);
}

// gated_rmsnorm_*: x and `like_x` (z, y, dy, dx, dz) (rows, N); weight (N) contiguous; N divisible
// by group_size; rstd (rows, N / group_size) contiguous.
inline void check_gated_rmsnorm_args(
    const char* op, const Tensor& x, const Tensor& weight, std::int64_t group_size,
    const Tensor& rstd, std::initializer_list<std::pair<const char*, const Tensor*>> like_x,
    Device device) {
  check_float_view(op, "x", x, x, "x", device);
  check_rank(op, "x", x, 2);
  const std::int64_t n = x.size(1);
  if (group_size < 1 || n % group_size != 0) {
    fail(op, "group_size " + std::to_string(group_size) + " must divide the features of x " +
                 x.describe());
  }
  check_float_view(op, "weight", weight, x, "x", device);
  check_shape(op, "weight", weight, {n});
  check_contiguous(op, "weight", weight);
  check_float_view(op, "rstd", rstd, x, "x", device);
  check_shape(op, "rstd", rstd, {x.size(0), n / group_size});
  check_contiguous(op, "rstd", rstd);
  for (const auto& [name, t] : like_x) {
    check_float_view(op, name, *t, x, "x", device);
    check_same_shape(op, name, *t, "x", x);
  }
}

// ssd_scan_backward's gradients: each shaped and typed as its input.
inline void check_ssd_scan_grads(const char* op, const Tensor& dy, const Backend::SsdScan& s,
                                 const Backend::SsdScanGrads& g, Device device) {
  const std::pair<const char*, const Tensor*> views[] = {{"dy", &dy}, {"dx", &g.dx}};
  for (const auto& [name, t] : views) {
    check_float_view(op, name, *t, s.x, "x", device);
    check_same_shape(op, name, *t, "x", s.x);
  }
  check_float_view(op, "ddt", g.ddt, s.x, "x", device);
  check_same_shape(op, "ddt", g.ddt, "dt", s.dt);
  check_float_view(op, "dB", g.dB, s.x, "x", device);
  check_same_shape(op, "dB", g.dB, "B", s.B);
  check_float_view(op, "dC", g.dC, s.x, "x", device);
  check_same_shape(op, "dC", g.dC, "C", s.C);
  const std::pair<const char*, const Tensor*> params[] = {
      {"dA_log", &g.dA_log}, {"dD", &g.dD}, {"ddt_bias", &g.ddt_bias}};
  for (const auto& [name, t] : params) {
    check_float_view(op, name, *t, s.x, "x", device);
    check_shape(op, name, *t, {s.x.size(2)});
    check_contiguous(op, name, *t);
  }
}

}  // namespace megatron::ops
