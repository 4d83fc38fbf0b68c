// CPU elementwise ops: bias add and its gradient, add/scale/axpy, GeLU, SwiGLU and dropout.

// Lets GCC if-convert the selects in exp/sigmoid/masking so the row loops vectorise; nothing here
// reads floating-point exception flags.
#pragma GCC optimize("no-trapping-math")

#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rows.h"
#include "backend/elementwise_math.h"

namespace megatron::cpu {

namespace {

void check_same_float(const char* op, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) {
  check_float_host(op, name, t);
  ops::check_same_dtype(op, name, t, ref_name, ref);
}

void check_at_least_1d(const char* op, const char* name, const Tensor& t) {
  if (t.dim() < 1)
    ops::fail(op, std::string(name) + " must have at least 1 dimension, got " + t.describe());
}

// The shape of t with its last dimension replaced.
Shape with_last_dim(const Tensor& t, std::int64_t n) {
  Shape s = t.shape();
  s.back() = n;
  return s;
}

// Span kernels inline everything they call (flatten), the per-element lambdas included: a call
// left in the loop would stop it vectorising.
#define MEGATRON_SPAN_KERNEL MEGATRON_CPU_CLONES __attribute__((flatten))

// o[j] = f(a[j]) and o[j] = f(a[j], b[j]) over one span (o may alias a or b).
template <typename T, typename F>
MEGATRON_SPAN_KERNEL void unary_span(const T* a, T* o, std::int64_t count, F f) {
#pragma omp simd
  for (std::int64_t j = 0; j < count; ++j)
    o[j] = f(a[j]);
}
template <typename T, typename F>
MEGATRON_SPAN_KERNEL void binary_span(const T* a, const T* b, T* o, std::int64_t count, F f) {
#pragma omp simd
  for (std::int64_t j = 0; j < count; ++j)
    o[j] = f(a[j], b[j]);
}

// y = f(x) elementwise over same-shaped tensors (y may alias x).
template <typename T, typename F>
void map_unary(const Tensor& x, Tensor& y, F f) {
  const RowsIn<T> in(x);
  RowsOut<T> out(y, false);
  for_each_span(x.numel(), last_dim(x), in.contiguous() && out.contiguous(),
                [&](std::int64_t first, std::int64_t count, std::int64_t r) {
                  unary_span(in.at(first, r), out.at(first, r), count, f);
                });
  out.finish();
}

// y = f(a, b) elementwise over same-shaped tensors (y may alias a or b).
template <typename T, typename F>
void map_binary(const Tensor& a, const Tensor& b, Tensor& y, bool keep_y, F f) {
  const RowsIn<T> in_a(a), in_b(b);
  RowsOut<T> out(y, keep_y);
  for_each_span(a.numel(), last_dim(a), in_a.contiguous() && in_b.contiguous() && out.contiguous(),
                [&](std::int64_t first, std::int64_t count, std::int64_t r) {
                  binary_span(in_a.at(first, r), in_b.at(first, r), out.at(first, r), count, f);
                });
  out.finish();
}

// One row of dx = [dgate | dup] from dy (f) and x = [gate | up] (2f).
template <typename T>
MEGATRON_SPAN_KERNEL void swiglu_backward_row(const T* dy, const T* x, std::int64_t f, T* dx) {
#pragma omp simd
  for (std::int64_t j = 0; j < f; ++j)
    math::swiglu_grad(dy[j], x[j], x[f + j], dx[j], dx[f + j]);
}

void check_unary(const char* op, const Tensor& x, const char* y_name, const Tensor& y) {
  check_float_host(op, "x", x);
  check_same_float(op, y_name, y, "x", x);
  ops::check_same_shape(op, y_name, y, "x", x);
}

// o[j] = a[j] * scale where Philox keeps stream index `index` + j, else 0. Philox blocks are made
// a tile at a time in a separate loop so both loops vectorise.
template <typename T>
MEGATRON_SPAN_KERNEL void dropout_span(const T* a, T* o, std::int64_t count, std::uint64_t seed,
                                       std::uint64_t index, float p, T scale) {
  constexpr std::int64_t kTile = 1024, kBlocks = kTile / 4 + 2;
  std::uint32_t lane0[kBlocks], lane1[kBlocks], lane2[kBlocks], lane3[kBlocks];
  std::uint32_t words[4 * kBlocks];
  for (std::int64_t t0 = 0; t0 < count; t0 += kTile) {
    const std::int64_t len = std::min(kTile, count - t0);
    const std::uint64_t first = index + static_cast<std::uint64_t>(t0);
    const std::uint64_t first_block = first >> 2;
    const std::int64_t blocks =
        static_cast<std::int64_t>(((first + len - 1) >> 2) - first_block) + 1;
    // One lane array per Philox word keeps the stores contiguous, so the block loop vectorises.
#pragma omp simd
    for (std::int64_t b = 0; b < blocks; ++b) {
      const Philox4 r = philox4x32(seed, first_block + static_cast<std::uint64_t>(b));
      lane0[b] = r.v[0];
      lane1[b] = r.v[1];
      lane2[b] = r.v[2];
      lane3[b] = r.v[3];
    }
#pragma omp simd
    for (std::int64_t b = 0; b < blocks; ++b) {
      words[4 * b] = lane0[b];
      words[4 * b + 1] = lane1[b];
      words[4 * b + 2] = lane2[b];
      words[4 * b + 3] = lane3[b];
    }
    const std::uint32_t* w = words + (first & 3);
    const T* in = a + t0;
    T* out = o + t0;
#pragma omp simd
    for (std::int64_t j = 0; j < len; ++j) {
      out[j] = in[j] * (math::dropout_keeps_word(w[j], p) ? scale : T(0));
    }
  }
}

// y = x * scale where Philox keeps element i (the logical index), 0 elsewhere.
template <typename T>
void dropout(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset, Tensor& y) {
  const RowsIn<T> in(x);
  RowsOut<T> out(y, false);
  const T scale = math::dropout_scale<T>(p);
  const bool drop_all = p >= 1.0f;
  for_each_span(x.numel(), last_dim(x), in.contiguous() && out.contiguous(),
                [&](std::int64_t first, std::int64_t count, std::int64_t r) {
                  T* o = out.at(first, r);
                  if (drop_all) {
                    std::fill(o, o + count, T(0));
                  } else {
                    dropout_span(in.at(first, r), o, count, seed,
                                 offset + static_cast<std::uint64_t>(first), p, scale);
                  }
                });
  out.finish();
}

void check_dropout_p(const char* op, float p) {
  if (!(p >= 0.0f && p <= 1.0f)) ops::fail(op, "p must be in [0, 1], got " + std::to_string(p));
}

}  // namespace

void CpuBackend::bias_add(const Tensor& x, const Tensor& bias, Tensor& y) {
  constexpr const char* op = "bias_add";
  check_unary(op, x, "y", y);
  check_at_least_1d(op, "x", x);
  check_same_float(op, "bias", bias, "x", x);
  ops::check_shape(op, "bias", bias, {x.size(-1)});
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const RowsIn<T> in(x), b(bias);
    RowsOut<T> out(y, false);
    const T* pb = b.row(0);
    const std::int64_t n = x.size(-1);
    for_each_row(row_count(x), n, [&](std::int64_t r) {
      binary_span(in.row(r), pb, out.row(r), n, [](T u, T v) { return u + v; });
    });
    out.finish();
  });
}

void CpuBackend::bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate) {
  constexpr const char* op = "bias_grad";
  check_float_host(op, "dy", dy);
  check_at_least_1d(op, "dy", dy);
  check_same_float(op, "dbias", dbias, "dy", dy);
  ops::check_shape(op, "dbias", dbias, {dy.size(-1)});
  dispatch_float(op, dy.dtype(), [&]<typename T>() {
    const RowsIn<T> in(dy);
    RowsOut<T> out(dbias, accumulate);
    const std::int64_t rows = row_count(dy), n = dy.size(-1);
    ChunkedColumnSums<T> sums(rows, n, 1);
    for_each_chunk(sums, rows, n, [&](std::int64_t c) {
      T* partial = sums.partial(c, 0);
      for (std::int64_t r = sums.first_row(c); r < sums.end_row(c, rows); ++r) {
        const T* g = in.row(r);
#pragma omp simd
        for (std::int64_t j = 0; j < n; ++j)
          partial[j] += g[j];
      }
    });
    sums.reduce(0, out.row(0), accumulate);
    out.finish();
  });
}

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  constexpr const char* op = "add";
  check_float_host(op, "a", a);
  check_same_float(op, "b", b, "a", a);
  ops::check_same_shape(op, "b", b, "a", a);
  check_same_float(op, "y", y, "a", a);
  ops::check_same_shape(op, "y", y, "a", a);
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    map_binary<T>(a, b, y, false, [](T u, T v) { return u + v; });
  });
}

void CpuBackend::scale(Tensor& x, double alpha) {
  constexpr const char* op = "scale";
  check_float_host(op, "x", x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T factor = static_cast<T>(alpha);
    RowsOut<T> out(x, true);
    for_each_span(x.numel(), last_dim(x), out.contiguous(),
                  [&](std::int64_t first, std::int64_t count, std::int64_t r) {
                    T* o = out.at(first, r);
                    unary_span(o, o, count, [factor](T v) { return v * factor; });
                  });
    out.finish();
  });
}

void CpuBackend::axpy(double alpha, const Tensor& x, Tensor& y) {
  constexpr const char* op = "axpy";
  check_unary(op, x, "y", y);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T factor = static_cast<T>(alpha);
    map_binary<T>(x, y, y, true, [factor](T u, T v) { return v + factor * u; });
  });
}

void CpuBackend::tanh_forward(const Tensor& x, Tensor& y) {
  constexpr const char* op = "tanh_forward";
  check_unary(op, x, "y", y);
  dispatch_float(op, x.dtype(),
                 [&]<typename T>() { map_unary<T>(x, y, [](T v) { return math::tanh_of(v); }); });
}

void CpuBackend::tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  constexpr const char* op = "tanh_backward";
  check_unary(op, y, "dy", dy);
  check_same_float(op, "dx", dx, "y", y);
  ops::check_same_shape(op, "dx", dx, "y", y);
  dispatch_float(op, y.dtype(), [&]<typename T>() {
    map_binary<T>(dy, y, dx, false, [](T g, T v) { return g * math::tanh_grad_from_output(v); });
  });
}

void CpuBackend::gelu_forward(const Tensor& x, Tensor& y, GeluApproximation approx) {
  constexpr const char* op = "gelu_forward";
  check_unary(op, x, "y", y);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    if (approx == GeluApproximation::tanh) {
      map_unary<T>(x, y, [](T v) { return math::gelu_tanh(v); });
    } else {
      map_unary<T>(x, y, [](T v) { return math::gelu_erf(v); });
    }
  });
}

void CpuBackend::gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx,
                               GeluApproximation approx) {
  constexpr const char* op = "gelu_backward";
  check_unary(op, x, "dy", dy);
  check_same_float(op, "dx", dx, "x", x);
  ops::check_same_shape(op, "dx", dx, "x", x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    if (approx == GeluApproximation::tanh) {
      map_binary<T>(dy, x, dx, false, [](T g, T v) { return g * math::gelu_tanh_grad(v); });
    } else {
      map_binary<T>(dy, x, dx, false, [](T g, T v) { return g * math::gelu_erf_grad(v); });
    }
  });
}

void CpuBackend::swiglu_forward(const Tensor& x, Tensor& y) {
  constexpr const char* op = "swiglu_forward";
  check_float_host(op, "x", x);
  check_at_least_1d(op, "x", x);
  if (x.size(-1) % 2 != 0) {
    ops::fail(op, "x's last dimension holds [gate | up] and must be even, got " + x.describe());
  }
  const std::int64_t f = x.size(-1) / 2;
  check_same_float(op, "y", y, "x", x);
  ops::check_shape(op, "y", y, with_last_dim(x, f));
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const RowsIn<T> in(x);
    RowsOut<T> out(y, false);
    for_each_row(row_count(x), 2 * f, [&](std::int64_t r) {
      const T* gate = in.row(r);
      binary_span(gate, gate + f, out.row(r), f, [](T g, T u) { return math::swiglu(g, u); });
    });
    out.finish();
  });
}

void CpuBackend::swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  constexpr const char* op = "swiglu_backward";
  check_float_host(op, "x", x);
  check_at_least_1d(op, "x", x);
  if (x.size(-1) % 2 != 0) {
    ops::fail(op, "x's last dimension holds [gate | up] and must be even, got " + x.describe());
  }
  const std::int64_t f = x.size(-1) / 2;
  check_same_float(op, "dy", dy, "x", x);
  ops::check_shape(op, "dy", dy, with_last_dim(x, f));
  check_same_float(op, "dx", dx, "x", x);
  ops::check_same_shape(op, "dx", dx, "x", x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const RowsIn<T> in(x), grad(dy);
    RowsOut<T> out(dx, false);
    for_each_row(row_count(x), 2 * f, [&](std::int64_t r) {
      swiglu_backward_row(grad.row(r), in.row(r), f, out.row(r));
    });
    out.finish();
  });
}

void CpuBackend::dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset,
                                 Tensor& y) {
  constexpr const char* op = "dropout_forward";
  check_unary(op, x, "y", y);
  check_dropout_p(op, p);
  dispatch_float(op, x.dtype(), [&]<typename T>() { dropout<T>(x, p, seed, offset, y); });
}

void CpuBackend::dropout_backward(const Tensor& dy, float p, std::uint64_t seed,
                                  std::uint64_t offset, Tensor& dx) {
  constexpr const char* op = "dropout_backward";
  check_float_host(op, "dy", dy);
  check_same_float(op, "dx", dx, "dy", dy);
  ops::check_same_shape(op, "dx", dx, "dy", dy);
  check_dropout_p(op, p);
  dispatch_float(op, dy.dtype(), [&]<typename T>() { dropout<T>(dy, p, seed, offset, dx); });
}

}  // namespace megatron::cpu
