// CPU gated RMSNorm of Mamba-2 (mamba_ssm's RMSNormGated with norm_before_gate = False: the
// norm of x * silu(z) over groups of features), forward and backward; the weight's gradient is
// summed in fixed row chunks, so it does not depend on the thread count.

// Lets GCC if-convert the selects in sigmoid so the feature loops vectorise.
#pragma GCC optimize("no-trapping-math")

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rows.h"
#include "backend/op_argument_checks.h"

namespace megatron::cpu {

namespace {

template <typename T>
T* row_of(const Tensor& t, std::int64_t r) {
  return t.data<T>() + r * t.stride(0);
}

template <typename T>
MEGATRON_CPU_CLONES void forward_row(const T* x, const T* z, const T* w, std::int64_t n,
                                     std::int64_t group, T eps, T* y, T* rstd) {
  for (std::int64_t g0 = 0, j = 0; g0 < n; g0 += group, ++j) {
    T squares = 0;
#pragma omp simd reduction(+ : squares)
    for (std::int64_t i = g0; i < g0 + group; ++i) {
      const T u = x[i] * (z[i] / (T(1) + std::exp(-z[i])));
      y[i] = u;
      squares += u * u;
    }
    const T r = T(1) / std::sqrt(squares / static_cast<T>(group) + eps);
    rstd[j] = r;
#pragma omp simd
    for (std::int64_t i = g0; i < g0 + group; ++i)
      y[i] = y[i] * r * w[i];
  }
}

template <typename T>
MEGATRON_CPU_CLONES void backward_row(const T* dy, const T* x, const T* z, const T* w,
                                      const T* rstd, std::int64_t n, std::int64_t group, T* dx,
                                      T* dz, T* part_dw) {
  for (std::int64_t g0 = 0, j = 0; g0 < n; g0 += group, ++j) {
    const T r = rstd[j];
    T dot = 0;  // sum of dy * w * uhat over the group
#pragma omp simd reduction(+ : dot)
    for (std::int64_t i = g0; i < g0 + group; ++i) {
      const T uhat = x[i] * (z[i] / (T(1) + std::exp(-z[i]))) * r;
      dot += dy[i] * w[i] * uhat;
      part_dw[i] += dy[i] * uhat;
    }
    const T mean_dot = dot / static_cast<T>(group);
#pragma omp simd
    for (std::int64_t i = g0; i < g0 + group; ++i) {
      const T s = T(1) / (T(1) + std::exp(-z[i]));
      const T gate = z[i] * s;
      const T uhat = x[i] * gate * r;
      const T du = r * (dy[i] * w[i] - uhat * mean_dot);
      dx[i] = du * gate;
      dz[i] = du * x[i] * s * (T(1) + z[i] * (T(1) - s));
    }
  }
}

}  // namespace

void CpuBackend::gated_rmsnorm_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                                       std::int64_t group_size, float eps, Tensor& y,
                                       Tensor& rstd) {
  constexpr const char* op = "gated_rmsnorm_forward";
  ops::check_gated_rmsnorm_args(op, x, weight, group_size, rstd, {{"z", &z}, {"y", &y}}, device());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const std::int64_t rows = x.size(0), n = x.size(1), groups = n / group_size;
    const T* w = weight.data<T>();
    T* saved = rstd.numel() ? rstd.data<T>() : nullptr;
#pragma omp parallel for schedule(static) if (rows * n >= kParallelElements)
    for (std::int64_t r = 0; r < rows; ++r) {
      forward_row<T>(row_of<T>(x, r), row_of<T>(z, r), w, n, group_size, static_cast<T>(eps),
                     row_of<T>(y, r), saved + r * groups);
    }
  });
}

void CpuBackend::gated_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& z,
                                        const Tensor& weight, std::int64_t group_size,
                                        const Tensor& rstd, Tensor& dx, Tensor& dz, Tensor& dweight,
                                        bool accumulate_params) {
  constexpr const char* op = "gated_rmsnorm_backward";
  ops::check_gated_rmsnorm_args(op, x, weight, group_size, rstd,
                                {{"z", &z}, {"dy", &dy}, {"dx", &dx}, {"dz", &dz}}, device());
  ops::check_param_grad(op, "dweight", dweight, "weight", weight, x, device());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const std::int64_t rows = x.size(0), n = x.size(1), groups = n / group_size;
    const T* w = weight.data<T>();
    const T* saved = rstd.numel() ? rstd.data<T>() : nullptr;
    ChunkedColumnSums<T> sums(rows, n, 1);
    for_each_chunk(sums, rows, n, [&](std::int64_t c) {
      for (std::int64_t r = sums.first_row(c); r < sums.end_row(c, rows); ++r) {
        backward_row<T>(row_of<T>(dy, r), row_of<T>(x, r), row_of<T>(z, r), w, saved + r * groups,
                        n, group_size, row_of<T>(dx, r), row_of<T>(dz, r), sums.partial(c, 0));
      }
    });
    sums.reduce(0, dweight.data<T>(), accumulate_params);
  });
}

}  // namespace megatron::cpu
