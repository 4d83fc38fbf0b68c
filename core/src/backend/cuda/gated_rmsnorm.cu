// CUDA gated RMSNorm (Mamba-2's RMSNormGated, norm_before_gate = False), forward and backward: one
// block per (row, group) for the group statistics and dx, dz; dweight summed over rows in the CPU
// backend's chunk order (see cuda_common.cuh), so it does not depend on the launch shape.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/elementwise_math.h"
#include "backend/op_argument_checks.h"

namespace megatron::cuda {

namespace {

// u = x * silu(z), the gated input the norm sees.
template <typename T>
__device__ __forceinline__ T gated(T x, T z) {
  return x * math::silu(z);
}

// Block (row r, group j) over features [j * group_size, (j + 1) * group_size).
template <typename T>
__global__ void gated_norm_forward_kernel(Rows<const T> x, Rows<const T> z, const T* weight,
                                          std::int64_t group_size, std::int64_t groups, T eps,
                                          Rows<T> y, T* saved_rstd) {
  __shared__ T scratch[32];
  const std::int64_t r = blockIdx.x / groups, first = (blockIdx.x % groups) * group_size;
  const T* a = x.row(r) + first * x.step;
  const T* gate = z.row(r) + first * z.step;
  T* o = y.row(r) + first * y.step;
  T squares = T(0);
  for (std::int64_t j = threadIdx.x; j < group_size; j += blockDim.x) {
    const T u = gated(a[j * x.step], gate[j * z.step]);
    squares += u * u;
  }
  const T inv_n = T(1) / static_cast<T>(group_size);
  const T rs = T(1) / std::sqrt(block_sum(squares, scratch) * inv_n + eps);
  for (std::int64_t j = threadIdx.x; j < group_size; j += blockDim.x) {
    const T u = gated(a[j * x.step], gate[j * z.step]);
    o[j * y.step] = u * rs * weight[first + j];
  }
  if (threadIdx.x == 0) saved_rstd[blockIdx.x] = rs;
}

// With uhat = u * rstd and g = dy * weight: du = rstd * (g - uhat * mean(g * uhat)) over the
// group, then through the gate: dx = du * silu(z), dz = du * x * silu'(z).
template <typename T>
__global__ void gated_norm_backward_kernel(Rows<const T> dy, Rows<const T> x, Rows<const T> z,
                                           const T* weight, std::int64_t group_size,
                                           std::int64_t groups, const T* saved_rstd, Rows<T> dx,
                                           Rows<T> dz) {
  __shared__ T scratch[32];
  const std::int64_t r = blockIdx.x / groups, first = (blockIdx.x % groups) * group_size;
  const T* a = x.row(r) + first * x.step;
  const T* gate = z.row(r) + first * z.step;
  const T* grad = dy.row(r) + first * dy.step;
  T* ox = dx.row(r) + first * dx.step;
  T* oz = dz.row(r) + first * dz.step;
  const T rs = saved_rstd[blockIdx.x];
  T sum_g_uhat = T(0);
  for (std::int64_t j = threadIdx.x; j < group_size; j += blockDim.x) {
    const T g = grad[j * dy.step] * weight[first + j];
    sum_g_uhat += g * (gated(a[j * x.step], gate[j * z.step]) * rs);
  }
  const T inv_n = T(1) / static_cast<T>(group_size);
  const T mean_g_uhat = block_sum(sum_g_uhat, scratch) * inv_n;
  for (std::int64_t j = threadIdx.x; j < group_size; j += blockDim.x) {
    const T v = a[j * x.step], zv = gate[j * z.step];
    const T uhat = gated(v, zv) * rs;
    const T g = grad[j * dy.step] * weight[first + j];
    const T du = rs * (g - uhat * mean_g_uhat);
    ox[j * dx.step] = du * math::silu(zv);
    oz[j * dz.step] = du * v * math::silu_grad(zv);
  }
}

// Chunk partials of dweight[j] = sum over rows of dy * uhat: partials[chunk][j], each chunk's rows
// added in order from zero.
template <typename T>
__global__ void gated_norm_weight_chunks_kernel(Rows<const T> dy, Rows<const T> x, Rows<const T> z,
                                                const T* saved_rstd, std::int64_t rows,
                                                std::int64_t n, std::int64_t group_size,
                                                T* partials) {
  const std::int64_t chunks = chunks_of(rows), groups = n / group_size;
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < chunks * n;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t c = t / n, j = t % n;
    const std::int64_t end = min(rows, (c + 1) * kRowsPerChunk);
    T sum = T(0);
    for (std::int64_t r = c * kRowsPerChunk; r < end; ++r) {
      const T uhat = gated(x.row(r)[j * x.step], z.row(r)[j * z.step]) *
                     saved_rstd[r * groups + j / group_size];
      sum += dy.row(r)[j * dy.step] * uhat;
    }
    partials[t] = sum;
  }
}

}  // namespace

void CudaBackend::gated_rmsnorm_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                                        std::int64_t group_size, float eps, Tensor& y,
                                        Tensor& rstd) {
  constexpr const char* op = "gated_rmsnorm_forward";
  ops::check_gated_rmsnorm_args(op, x, weight, group_size, rstd, {{"z", &z}, {"y", &y}}, device());
  const std::int64_t rows = x.size(0), n = x.size(1);
  const std::int64_t groups = n / group_size;
  if (rows * groups == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    gated_norm_forward_kernel<T>
        <<<static_cast<unsigned>(rows * groups), row_threads(group_size), 0, stream_>>>(
            const_rows<T>(op, "x", x), const_rows<T>(op, "z", z),
            static_cast<const T*>(weight.raw_data()), group_size, groups, static_cast<T>(eps),
            rows_view<T>(op, "y", y), static_cast<T*>(rstd.raw_data()));
    check_launch(op);
  });
}

void CudaBackend::gated_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& z,
                                         const Tensor& weight, std::int64_t group_size,
                                         const Tensor& rstd, Tensor& dx, Tensor& dz,
                                         Tensor& dweight, bool accumulate_params) {
  constexpr const char* op = "gated_rmsnorm_backward";
  const Device here = device();
  ops::check_gated_rmsnorm_args(op, x, weight, group_size, rstd,
                                {{"z", &z}, {"dy", &dy}, {"dx", &dx}, {"dz", &dz}}, here);
  ops::check_param_grad(op, "dweight", dweight, "weight", weight, x, here);
  const std::int64_t rows = x.size(0), n = x.size(1);
  const std::int64_t groups = n / group_size;
  if (n == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* saved_rstd = static_cast<const T*>(rstd.raw_data());
    if (rows > 0) {
      gated_norm_backward_kernel<T>
          <<<static_cast<unsigned>(rows * groups), row_threads(group_size), 0, stream_>>>(
              const_rows<T>(op, "dy", dy), const_rows<T>(op, "x", x), const_rows<T>(op, "z", z),
              static_cast<const T*>(weight.raw_data()), group_size, groups, saved_rstd,
              rows_view<T>(op, "dx", dx), rows_view<T>(op, "dz", dz));
      check_launch(op);
    }
    const std::int64_t chunks = chunks_of(rows);
    Tensor partials = Tensor::empty({std::max<std::int64_t>(chunks, 1), n}, x.dtype(), here);
    T* p = static_cast<T*>(partials.raw_data());
    if (chunks > 0) {
      gated_norm_weight_chunks_kernel<T><<<grid_for(chunks * n), kThreads, 0, stream_>>>(
          const_rows<T>(op, "dy", dy), const_rows<T>(op, "x", x), const_rows<T>(op, "z", z),
          saved_rstd, rows, n, group_size, p);
      check_launch(op);
    }
    reduce_chunks_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(
        p, chunks, n, static_cast<T*>(dweight.raw_data()), 1, accumulate_params);
    check_launch(op);
  });
}

}  // namespace megatron::cuda
