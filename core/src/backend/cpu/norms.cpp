// CPU LayerNorm and RMSNorm over the last dimension, forward and backward; parameter gradients
// are summed over rows in fixed chunks so they do not depend on the thread count.

// Lets GCC if-convert the selects in exp/sigmoid/masking so the row loops vectorise; nothing here
// reads floating-point exception flags.
#pragma GCC optimize("no-trapping-math")

#include <cmath>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rows.h"

namespace megatron::cpu {

namespace {

void check_like(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  check_float_host(op, name, t);
  ops::check_same_dtype(op, name, t, "x", x);
}

// x (..., N) and a parameter-shaped (N) tensor.
void check_param(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  check_like(op, name, t, x);
  ops::check_shape(op, name, t, {x.size(-1)});
}

// Saved per-row statistics: x's dtype, shape [rows] or x's leading dimensions, contiguous.
void check_row_stats(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  check_like(op, name, t, x);
  const Shape flat{row_count(x)};
  const Shape leading(x.shape().begin(), x.shape().end() - 1);
  if (t.shape() != flat && t.shape() != leading) {
    std::string expected = shape_str(flat);
    if (leading != flat) expected += " or " + shape_str(leading);
    ops::fail(op, std::string(name) + " must have shape " + expected + ", got " + t.describe());
  }
  ops::check_contiguous(op, name, t);
}

void check_input(const char* op, const Tensor& x) {
  check_float_host(op, "x", x);
  if (x.dim() < 1) ops::fail(op, "x must have at least 1 dimension, got " + x.describe());
}

void check_like_x(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  check_like(op, name, t, x);
  ops::check_same_shape(op, name, t, "x", x);
}

// Normalises one row: xhat = (x - mean) * rstd, y = xhat * w (+ b); LayerNorm when `centred`,
// RMSNorm (mean 0) otherwise. Two passes over the cached row: centred squares do not cancel.
template <typename T>
MEGATRON_CPU_CLONES void norm_row(const T* x, const T* w, const T* b, std::int64_t n, T eps,
                                  bool centred, T* y, T& mean, T& rstd) {
  const T inv_n = T(1) / static_cast<T>(n);
  // The mean is summed relative to x[0], so a large common offset does not cost f32 digits.
  const T shift = centred ? x[0] : T(0);
  T sum = 0;
  if (centred) {
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j < n; ++j)
      sum += x[j] - shift;
  }
  const T mu = shift + sum * inv_n;
  T squares = 0;
#pragma omp simd reduction(+ : squares)
  for (std::int64_t j = 0; j < n; ++j)
    squares += (x[j] - mu) * (x[j] - mu);
  const T rs = T(1) / std::sqrt(squares * inv_n + eps);
  if (b) {
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j)
      y[j] = (x[j] - mu) * rs * w[j] + b[j];
  } else {
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j)
      y[j] = (x[j] - mu) * rs * w[j];
  }
  mean = mu;
  rstd = rs;
}

// One row of the backward: dx = rstd * (g - [centred] mean(g) - xhat * mean(g * xhat)) with
// g = dy * w, and this row's dy * xhat and dy added to the parameter partial sums (part_db may be
// null).
template <typename T>
MEGATRON_CPU_CLONES void norm_backward_row(const T* x, const T* dy, const T* w, T mean, T rstd,
                                           std::int64_t n, bool centred, T* dx, T* part_dw,
                                           T* part_db) {
  const T inv_n = T(1) / static_cast<T>(n);
  T sum_g = 0, sum_g_xhat = 0;
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
  for (std::int64_t j = 0; j < n; ++j) {
    const T g = dy[j] * w[j];
    sum_g += g;
    sum_g_xhat += g * ((x[j] - mean) * rstd);
  }
  const T mean_g = centred ? sum_g * inv_n : T(0), mean_g_xhat = sum_g_xhat * inv_n;
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) {
    const T xhat = (x[j] - mean) * rstd;
    dx[j] = rstd * (dy[j] * w[j] - mean_g - xhat * mean_g_xhat);
    part_dw[j] += dy[j] * xhat;
  }
  if (part_db) {
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j)
      part_db[j] += dy[j];
  }
}

// Forward over all rows; `mean` may be null (RMSNorm).
template <typename T>
void norm_forward(const Tensor& x, const Tensor& weight, const Tensor* bias, float eps,
                  bool centred, Tensor& y, Tensor* mean, Tensor& rstd) {
  const RowsIn<T> in(x), w(weight);
  const RowsIn<T> b(bias ? *bias : weight);
  RowsOut<T> out(y, false);
  const T* pw = w.row(0);
  const T* pb = bias ? b.row(0) : nullptr;
  T* saved_mean = mean && mean->numel() ? mean->data<T>() : nullptr;
  T* saved_rstd = rstd.numel() ? rstd.data<T>() : nullptr;
  const std::int64_t n = x.size(-1);
  for_each_row(row_count(x), n, [&](std::int64_t r) {
    T mu, rs;
    norm_row(in.row(r), pw, pb, n, static_cast<T>(eps), centred, out.row(r), mu, rs);
    if (saved_mean) saved_mean[r] = mu;
    saved_rstd[r] = rs;
  });
  out.finish();
}

// Backward over all rows; `mean` (RMSNorm) and `dbias` may be null.
template <typename T>
void norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor* mean,
                   const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor* dbias,
                   bool accumulate_params) {
  const RowsIn<T> in(x), grad(dy), w(weight);
  RowsOut<T> out(dx, false);
  RowsOut<T> out_dweight(dweight, accumulate_params);
  std::optional<RowsOut<T>> out_dbias;
  if (dbias) out_dbias.emplace(*dbias, accumulate_params);
  const T* pw = w.row(0);
  const T* saved_mean = mean && mean->numel() ? mean->data<T>() : nullptr;
  const T* saved_rstd = rstd.numel() ? rstd.data<T>() : nullptr;
  const std::int64_t rows = row_count(x), n = x.size(-1);
  ChunkedColumnSums<T> sums(rows, n, dbias ? 2 : 1);
  for_each_chunk(sums, rows, n, [&](std::int64_t c) {
    T* part_dbias = dbias ? sums.partial(c, 1) : nullptr;
    for (std::int64_t r = sums.first_row(c); r < sums.end_row(c, rows); ++r) {
      norm_backward_row(in.row(r), grad.row(r), pw, saved_mean ? saved_mean[r] : T(0),
                        saved_rstd[r], n, mean != nullptr, out.row(r), sums.partial(c, 0),
                        part_dbias);
    }
  });
  out.finish();
  sums.reduce(0, out_dweight.row(0), accumulate_params);
  out_dweight.finish();
  if (out_dbias) {
    sums.reduce(1, out_dbias->row(0), accumulate_params);
    out_dbias->finish();
  }
}

}  // namespace

void CpuBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                   float eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  constexpr const char* op = "layernorm_forward";
  check_input(op, x);
  check_param(op, "weight", weight, x);
  if (bias) check_param(op, "bias", *bias, x);
  check_like_x(op, "y", y, x);
  check_row_stats(op, "mean", mean, x);
  check_row_stats(op, "rstd", rstd, x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    norm_forward<T>(x, weight, bias, eps, true, y, &mean, rstd);
  });
}

void CpuBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                    Tensor& dweight, Tensor* dbias, bool accumulate_params) {
  constexpr const char* op = "layernorm_backward";
  check_input(op, x);
  check_like_x(op, "dy", dy, x);
  check_param(op, "weight", weight, x);
  check_row_stats(op, "mean", mean, x);
  check_row_stats(op, "rstd", rstd, x);
  check_like_x(op, "dx", dx, x);
  check_param(op, "dweight", dweight, x);
  if (dbias) check_param(op, "dbias", *dbias, x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    norm_backward<T>(dy, x, weight, &mean, rstd, dx, dweight, dbias, accumulate_params);
  });
}

void CpuBackend::rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                                 Tensor& rstd) {
  constexpr const char* op = "rmsnorm_forward";
  check_input(op, x);
  check_param(op, "weight", weight, x);
  check_like_x(op, "y", y, x);
  check_row_stats(op, "rstd", rstd, x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    norm_forward<T>(x, weight, nullptr, eps, false, y, nullptr, rstd);
  });
}

void CpuBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                  const Tensor& rstd, Tensor& dx, Tensor& dweight,
                                  bool accumulate_params) {
  constexpr const char* op = "rmsnorm_backward";
  check_input(op, x);
  check_like_x(op, "dy", dy, x);
  check_param(op, "weight", weight, x);
  check_row_stats(op, "rstd", rstd, x);
  check_like_x(op, "dx", dx, x);
  check_param(op, "dweight", dweight, x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    norm_backward<T>(dy, x, weight, nullptr, rstd, dx, dweight, nullptr, accumulate_params);
  });
}

}  // namespace megatron::cpu
