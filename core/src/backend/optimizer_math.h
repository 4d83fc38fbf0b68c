// Per-element math for rotary embedding, softmax cross-entropy and the AdamW / SGD steps, shared
// by the CPU and CUDA backends so the CPU tests cover the arithmetic the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "megatron/backend/backend.h"
#include "megatron/tensor/half.h"
#include "megatron/tensor/hd.h"

namespace megatron::ops {

// ---- rotary ("rotate half"): the pair (x1, x2) = (x[i], x[i + R/2]) with cos/sin at i and i +
// R/2.
template <typename T>
MEGATRON_HD void rotary_pair_forward(T x1, T x2, T cos1, T sin1, T cos2, T sin2, T& y1, T& y2) {
  y1 = x1 * cos1 - x2 * sin1;
  y2 = x2 * cos2 + x1 * sin2;
}

// The transpose of the forward rotation (its exact gradient).
template <typename T>
MEGATRON_HD void rotary_pair_backward(T dy1, T dy2, T cos1, T sin1, T cos2, T sin2, T& dx1,
                                      T& dx2) {
  dx1 = dy1 * cos1 + dy2 * sin2;
  dx2 = dy2 * cos2 - dy1 * sin1;
}

// cond ? a : b through bit masks: GCC (with the default -ftrapping-math) will not vectorise a
// select fed by a float comparison, but does vectorise integer masks.
MEGATRON_HD float select_float(bool cond, float a, float b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(cond);
  return detail::bits_float((detail::float_bits(a) & mask) | (detail::float_bits(b) & ~mask));
}

// ---- softmax exponentials: exp(x) for x = logit - max <= 0. The float version is branch-free
// (Cody-Waite reduction and Cephes' degree-6 polynomial, within 2 ulp of exp) so CPU loops
// vectorise; it flushes results below FLT_MIN (x < -87.33) to zero and is only valid for x <= 88.
MEGATRON_HD float softmax_exp(float x) {
  constexpr float kMaxInput = 88.0f, kMinInput = -87.33654f;  // 2^127 and 2^-126 stay normal
  constexpr float kRoundMagic = 12582912.0f;                  // 1.5 * 2^23: adding it rounds
  const bool underflows = x < kMinInput;
  // NaN compares false both ways, so it passes through and comes out as NaN.
  const float clamped =
      select_float(underflows, kMinInput, select_float(x > kMaxInput, kMaxInput, x));
  const float shifted = clamped * 1.44269504088896341f + kRoundMagic;
  const float n = shifted - kRoundMagic;  // round(x / ln 2)
  float r = clamped - n * 0.693359375f;   // ln 2 split in two so n * hi is exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float exp_r = p * r * r + r + 1.0f;
  // 2^n from the integer n held in the low mantissa bits of `shifted` (unsigned arithmetic is
  // modular, so a NaN input cannot overflow; its result is NaN anyway).
  const std::uint32_t biased_exponent =
      detail::float_bits(shifted) - detail::float_bits(kRoundMagic) + 127u;
  const float scale = detail::bits_float(biased_exponent << 23);
  return select_float(underflows, 0.0f, exp_r * scale);
}

// f64 logits exist for gradient checks: the library exp.
MEGATRON_HD double softmax_exp(double x) {
  return std::exp(x);
}

// ---- cross-entropy: d loss / d logit = (softmax - onehot) * dloss, softmax = exp(x - max) / sum.
template <typename T>
MEGATRON_HD T cross_entropy_grad(T logit, T row_max, T inv_sum_exp, bool is_target, T dloss) {
  const T softmax = softmax_exp(logit - row_max) * inv_sum_exp;
  return (is_target ? softmax - T(1) : softmax) * dloss;
}

// ---- AdamW exactly as torch.optim.AdamW (single-tensor path), with the scalars it derives in
// double precision on the host and hands to the element kernels in the tensor's dtype.
template <typename T>
struct AdamScalars {
  T decay;  // 1 - lr * weight_decay
  T beta1, one_minus_beta1;
  T beta2, one_minus_beta2;
  T bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  T eps;
  T neg_step_size;  // -lr / (1 - beta1^step)
};

template <typename T>
AdamScalars<T> adam_scalars(const AdamParams& p) {
  const double lr = p.lr, beta1 = p.beta1, beta2 = p.beta2;
  const double step = static_cast<double>(p.step);
  const double bias_correction1 = 1.0 - std::pow(beta1, step);
  const double bias_correction2 = 1.0 - std::pow(beta2, step);
  return {T(1.0 - lr * double(p.weight_decay)),
          T(beta1),
          T(1.0 - beta1),
          T(beta2),
          T(1.0 - beta2),
          T(std::sqrt(bias_correction2)),
          T(double(p.eps)),
          T(-lr / bias_correction1)};
}

// torch: p.mul_(decay); m.mul_(b1).add_(g, alpha=1-b1); v.mul_(b2).addcmul_(g, g, value=1-b2);
// denom = (v.sqrt() / sqrt(bc2)).add_(eps); p.addcdiv_(m, denom, value=-lr/bc1). The operation
// order below is ATen's scalar order for those kernels.
template <typename T>
MEGATRON_HD void adamw_update(T& param, T grad, T& exp_avg, T& exp_avg_sq,
                              const AdamScalars<T>& s) {
  param = param * s.decay;
  exp_avg = exp_avg * s.beta1 + s.one_minus_beta1 * grad;
  exp_avg_sq = exp_avg_sq * s.beta2 + s.one_minus_beta2 * grad * grad;
  const T denom = std::sqrt(exp_avg_sq) / s.bias_correction2_sqrt + s.eps;
  param = param + s.neg_step_size * exp_avg / denom;
}

// ---- SGD exactly as torch.optim.SGD with dampening 0. The momentum buffer starts at zero: torch
// initialises it to the first (weight-decayed) gradient, and momentum * 0 + g == g, so a zeroed
// buffer reproduces torch's first step without a separate "first step" flag.
template <typename T>
struct SgdScalars {
  T neg_lr;
  T momentum;
  T weight_decay;
};

template <typename T>
SgdScalars<T> sgd_scalars(const SgdParams& p) {
  return {T(-double(p.lr)), T(p.momentum), T(p.weight_decay)};
}

// Plain SGD (momentum 0): p += -lr * (g + wd * p).
template <typename T>
MEGATRON_HD void sgd_update(T& param, T grad, const SgdScalars<T>& s) {
  const T d = grad + s.weight_decay * param;
  param = param + s.neg_lr * d;
}

// With momentum: buf = momentum * buf + d; step along buf, or along d + momentum * buf (nesterov).
template <bool Nesterov, typename T>
MEGATRON_HD void sgd_momentum_update(T& param, T grad, T& buf, const SgdScalars<T>& s) {
  const T d = grad + s.weight_decay * param;
  buf = buf * s.momentum + d;
  const T direction = Nesterov ? d + s.momentum * buf : buf;
  param = param + s.neg_lr * direction;
}

}  // namespace megatron::ops
