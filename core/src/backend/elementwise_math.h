// Per-element math shared by the CPU and CUDA backends (MEGATRON_HD): activations and their
// derivatives, the dropout keep test, and an exp the CPU compiler can vectorise.
// Written in C++17 so the CUDA sources can include it.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "megatron/tensor/hd.h"
#include "megatron/tensor/philox.h"

// Always inlined on the host: a call left inside a loop would stop it vectorising.
#if defined(__CUDACC__)
#define MEGATRON_MATH MEGATRON_HD
#else
#define MEGATRON_MATH inline __attribute__((always_inline))
#endif

namespace megatron::math {

// exp(x) for float from plain arithmetic (Cephes expf: Cody-Waite reduction and a degree-6
// polynomial, about 1 ulp), so loops calling it vectorise; libm's expf does not. Results below
// float's normal range flush to 0 (softmax's masked -inf lands there too); above it, +inf.
MEGATRON_MATH float exp_poly(float x) {
  const float input = x;
  const bool not_a_number = x != x;
  const bool underflow = x < -87.33654f;
  const bool overflow = x > 88.72283f;
  // Keep n in range for the integer conversion below whatever x is.
  x = (underflow || not_a_number) ? -87.33654f : (overflow ? 88.72283f : x);
  // Round to nearest with the 1.5 * 2^23 trick: floorf/nearbyintf do not vectorise on SSE2.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n in two normal factors: n reaches 128 just below overflow and -126 at the bottom.
  const std::int32_t n_int = static_cast<std::int32_t>(n);
  const std::int32_t n_half = n_int / 2;
  const std::int32_t bits_low = (n_half + 127) * (1 << 23);
  const std::int32_t bits_high = (n_int - n_half + 127) * (1 << 23);
  float two_to_low, two_to_high;
  std::memcpy(&two_to_low, &bits_low, sizeof two_to_low);
  std::memcpy(&two_to_high, &bits_high, sizeof two_to_high);
  const float result = p * two_to_low * two_to_high;
  return not_a_number ? input : (underflow ? 0.0f : (overflow ? HUGE_VALF : result));
}

// The exp each platform computes fastest at full float accuracy; f64 always uses libm.
MEGATRON_MATH float exp_fast(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return exp_poly(x);
#endif
}
MEGATRON_MATH double exp_fast(double x) {
  return exp(x);
}

// erfc(x) for float from plain arithmetic (Numerical Recipes' erfcc Chebyshev fit, relative error
// below 1.2e-7 for x >= 0 before float rounding), so GeLU's loops vectorise; libm's erfcf does not.
MEGATRON_MATH float erfc_poly(float x) {
  const float z = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float tail = t * exp_poly(p - z * z);
  return x < 0.0f ? 2.0f - tail : tail;
}

MEGATRON_MATH float erfc_fast(float x) {
#if defined(__CUDA_ARCH__)
  return erfcf(x);
#else
  return erfc_poly(x);
#endif
}
MEGATRON_MATH double erfc_fast(double x) {
  return erfc(x);
}

// sigmoid(z) and 1 - sigmoid(z) from e = exp(-z), each accurate in its own tail (e may be 0 or
// +inf).
template <typename T>
MEGATRON_MATH void sigmoid_pair(T e, T& sigmoid, T& complement) {
  sigmoid = T(1) / (T(1) + e);
  complement = T(1) / (T(1) + T(1) / e);
}

// ---- tanh (BERT's pooler) ----------------------------------------------------------------------
// tanh x = 1 - 2 / (exp(2x) + 1): exact at both tails (no inf/inf) and needs only exp.
template <typename T>
MEGATRON_MATH T tanh_of(T x) {
  return T(1) - T(2) / (exp_fast(T(2) * x) + T(1));
}

// d tanh / dx from the output y: 1 - y^2.
template <typename T>
MEGATRON_MATH T tanh_grad_from_output(T y) {
  return T(1) - y * y;
}

// ---- GeLU --------------------------------------------------------------------------------------
// Exact form: x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 (erfc keeps the negative tail accurate).
template <typename T>
MEGATRON_MATH T gelu_erf(T x) {
  return T(0.5) * x * erfc_fast(-x * T(0.70710678118654752440));
}

// d/dx x Phi(x) = Phi(x) + x phi(x).
template <typename T>
MEGATRON_MATH T gelu_erf_grad(T x) {
  const T cdf = T(0.5) * erfc_fast(-x * T(0.70710678118654752440));
  const T pdf = T(0.39894228040143267794) * exp_fast(T(-0.5) * x * x);
  return cdf + x * pdf;
}

// Megatron's tanh approximation 0.5 x (1 + tanh(u)), u = 0.79788456 (x + 0.044715 x^3), written
// as x * sigmoid(2u) (the same function) so it needs only exp.
constexpr double kGeluTanhK0 = 0.79788456;
constexpr double kGeluTanhK1 = 0.044715;

template <typename T>
MEGATRON_MATH T gelu_tanh(T x) {
  const T u = T(kGeluTanhK0) * x * (T(1) + T(kGeluTanhK1) * x * x);
  return x / (T(1) + exp_fast(T(-2) * u));
}

// d/dx x s(2u) = s + 2 x s (1 - s) u', u' = 0.79788456 (1 + 3 * 0.044715 x^2).
template <typename T>
MEGATRON_MATH T gelu_tanh_grad(T x) {
  const T u = T(kGeluTanhK0) * x * (T(1) + T(kGeluTanhK1) * x * x);
  const T du = T(kGeluTanhK0) * (T(1) + T(3 * kGeluTanhK1) * x * x);
  T s, c;
  sigmoid_pair(exp_fast(T(-2) * u), s, c);
  return s + T(2) * x * s * c * du;
}

// ---- SiLU / SwiGLU ------------------------------------------------------------------------------
template <typename T>
MEGATRON_MATH T silu(T x) {
  return x / (T(1) + exp_fast(-x));
}

// d/dx x s(x) = s + x s (1 - s).
template <typename T>
MEGATRON_MATH T silu_grad(T x) {
  T s, c;
  sigmoid_pair(exp_fast(-x), s, c);
  return s + x * s * c;
}

// SwiGLU y = silu(gate) * up; gradients for dy.
template <typename T>
MEGATRON_MATH T swiglu(T gate, T up) {
  return silu(gate) * up;
}
template <typename T>
MEGATRON_MATH void swiglu_grad(T dy, T gate, T up, T& dgate, T& dup) {
  T s, c;
  sigmoid_pair(exp_fast(-gate), s, c);
  dgate = dy * up * (s + gate * s * c);
  dup = dy * gate * s;
}

// ---- dropout ------------------------------------------------------------------------------------
// Keep test for one Philox word: uniform in (0, 1] >= p, so p = 0 keeps everything.
MEGATRON_MATH bool dropout_keeps_word(std::uint32_t word, float p) {
  return philox_uniform(word) >= p;
}

// Whether logical element i of the stream (seed, offset) is kept (backend.h's definition).
MEGATRON_MATH bool dropout_keeps(std::uint64_t seed, std::uint64_t offset, std::uint64_t i,
                                 float p) {
  return philox_uniform_at(seed, offset, i) >= p;
}

// Factor applied to kept elements: 1 / (1 - p); p = 1 drops everything, so 0.
template <typename T>
MEGATRON_MATH T dropout_scale(float p) {
  return p >= 1.0f ? T(0) : T(1) / (T(1) - T(p));
}

}  // namespace megatron::math
