// CUDA LayerNorm and RMSNorm over the last dimension, forward and backward: one block per row for
// the row statistics and dx; parameter gradients summed over rows in the CPU backend's chunk
// order (see cuda_common.cuh), so they match the CPU bit for bit.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::cuda {

namespace {

// Centre: LayerNorm (subtract the mean; bias optional) or RMSNorm (no mean, no bias).
template <typename T, bool Centre>
__global__ void norm_forward_kernel(Rows<const T> x, const T* weight, std::int64_t weight_step,
                                    const T* bias, std::int64_t bias_step, std::int64_t n, T eps,
                                    Rows<T> y, T* saved_mean, T* saved_rstd) {
  __shared__ T scratch[32];
  const std::int64_t r = blockIdx.x;
  const T* a = x.row(r);
  T* o = y.row(r);
  const T inv_n = T(1) / static_cast<T>(n);
  T mu = T(0);
  if constexpr (Centre) {
    T sum = T(0);
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      sum += a[j * x.step];
    mu = block_sum(sum, scratch) * inv_n;
  }
  // Two passes: the variance of centred values does not cancel.
  T squares = T(0);
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const T d = a[j * x.step] - mu;
    squares += d * d;
  }
  const T rs = T(1) / std::sqrt(block_sum(squares, scratch) * inv_n + eps);
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const T v = a[j * x.step];
    const T w = weight[j * weight_step];
    if constexpr (Centre) {
      o[j * y.step] = bias ? (v - mu) * rs * w + bias[j * bias_step] : (v - mu) * rs * w;
    } else {
      o[j * y.step] = v * rs * w;
    }
  }
  if (threadIdx.x == 0) {
    if constexpr (Centre) saved_mean[r] = mu;
    saved_rstd[r] = rs;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight (RMSNorm: no mean(g) term,
// xhat = x * rstd).
template <typename T, bool Centre>
__global__ void norm_backward_dx_kernel(Rows<const T> dy, Rows<const T> x, const T* weight,
                                        std::int64_t weight_step, const T* saved_mean,
                                        const T* saved_rstd, std::int64_t n, Rows<T> dx) {
  __shared__ T scratch[32];
  const std::int64_t r = blockIdx.x;
  const T* a = x.row(r);
  const T* g = dy.row(r);
  T* o = dx.row(r);
  const T mu = Centre ? saved_mean[r] : T(0), rs = saved_rstd[r];
  const T inv_n = T(1) / static_cast<T>(n);
  T sum_g = T(0), sum_g_xhat = T(0);
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const T gw = g[j * dy.step] * weight[j * weight_step];
    if constexpr (Centre) sum_g += gw;
    sum_g_xhat += gw * ((a[j * x.step] - mu) * rs);
  }
  const T mean_g = Centre ? block_sum(sum_g, scratch) * inv_n : T(0);
  const T mean_g_xhat = block_sum(sum_g_xhat, scratch) * inv_n;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const T xhat = (a[j * x.step] - mu) * rs;
    const T gw = g[j * dy.step] * weight[j * weight_step];
    if constexpr (Centre) {
      o[j * dx.step] = rs * (gw - mean_g - xhat * mean_g_xhat);
    } else {
      o[j * dx.step] = rs * (gw - xhat * mean_g_xhat);
    }
  }
}

// Chunk partials of dweight (sum g * xhat) and, for LayerNorm, dbias (sum g): partials[q][c][j].
template <typename T, bool Centre>
__global__ void norm_param_chunks_kernel(Rows<const T> dy, Rows<const T> x, const T* saved_mean,
                                         const T* saved_rstd, std::int64_t rows, std::int64_t n,
                                         T* partials) {
  const std::int64_t chunks = chunks_of(rows);
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < chunks * n;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t c = t / n, j = t % n;
    const std::int64_t end = min(rows, (c + 1) * kRowsPerChunk);
    T dweight = T(0), dbias = T(0);
    for (std::int64_t r = c * kRowsPerChunk; r < end; ++r) {
      const T g = dy.row(r)[j * dy.step];
      const T mu = Centre ? saved_mean[r] : T(0);
      const T xhat = (x.row(r)[j * x.step] - mu) * saved_rstd[r];
      dweight += g * xhat;
      if constexpr (Centre) dbias += g;
    }
    partials[t] = dweight;
    if constexpr (Centre) partials[chunks * n + t] = dbias;
  }
}

void check_like(const char* op, const char* name, const Tensor& t, const Tensor& x, Device device) {
  ops::check_device(op, name, t, device);
  ops::check_dtype(op, name, t, {DType::f32, DType::f64});
  ops::check_same_dtype(op, name, t, "x", x);
}

void check_param(const char* op, const char* name, const Tensor& t, const Tensor& x,
                 Device device) {
  check_like(op, name, t, x, device);
  ops::check_shape(op, name, t, {x.size(-1)});
}

// Saved per-row statistics: x's dtype, shape [rows] or x's leading dimensions, contiguous.
void check_row_stats(const char* op, const char* name, const Tensor& t, const Tensor& x,
                     Device device) {
  check_like(op, name, t, x, device);
  const Shape flat{rows_of(x)};
  const Shape leading(x.shape().begin(), x.shape().end() - 1);
  if (t.shape() != flat && t.shape() != leading) {
    std::string expected = shape_str(flat);
    if (leading != flat) expected += " or " + shape_str(leading);
    ops::fail(op, std::string(name) + " must have shape " + expected + ", got " + t.describe());
  }
  ops::check_contiguous(op, name, t);
}

void check_input(const char* op, const Tensor& x, Device device) {
  ops::check_device(op, "x", x, device);
  ops::check_dtype(op, "x", x, {DType::f32, DType::f64});
  if (x.dim() < 1) ops::fail(op, "x must have at least 1 dimension, got " + x.describe());
}

void check_like_x(const char* op, const char* name, const Tensor& t, const Tensor& x,
                  Device device) {
  check_like(op, name, t, x, device);
  ops::check_same_shape(op, name, t, "x", x);
}

template <typename T>
const T* data_or_null(const Tensor* t) {
  return t && t->numel() ? static_cast<const T*>(t->raw_data()) : nullptr;
}

// dweight (and dbias) from the chunk partials, in the CPU's order.
template <typename T, bool Centre>
void param_grads(const char* op, cudaStream_t stream, Device device, const Tensor& dy,
                 const Tensor& x, const T* saved_mean, const T* saved_rstd, Tensor& dweight,
                 Tensor* dbias, bool accumulate) {
  const std::int64_t rows = rows_of(x), n = x.size(-1);
  const std::int64_t chunks = chunks_of(rows);
  Tensor partials =
      Tensor::empty({Centre ? 2 : 1, std::max<std::int64_t>(chunks, 1), n}, x.dtype(), device);
  T* p = static_cast<T*>(partials.raw_data());
  if (chunks > 0) {
    norm_param_chunks_kernel<T, Centre><<<grid_for(chunks * n), kThreads, 0, stream>>>(
        const_rows<T>(op, "dy", dy), const_rows<T>(op, "x", x), saved_mean, saved_rstd, rows, n, p);
    check_launch(op);
  }
  reduce_chunks_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
      p, chunks, n, static_cast<T*>(dweight.raw_data()), dweight.stride(0), accumulate);
  check_launch(op);
  if (Centre && dbias) {
    reduce_chunks_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        p + chunks * n, chunks, n, static_cast<T*>(dbias->raw_data()), dbias->stride(0),
        accumulate);
    check_launch(op);
  }
}

}  // namespace

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                    float eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  constexpr const char* op = "layernorm_forward";
  const Device here = device();
  check_input(op, x, here);
  check_param(op, "weight", weight, x, here);
  if (bias) check_param(op, "bias", *bias, x, here);
  check_like_x(op, "y", y, x, here);
  check_row_stats(op, "mean", mean, x, here);
  check_row_stats(op, "rstd", rstd, x, here);
  const std::int64_t rows = rows_of(x), n = x.size(-1);
  if (rows == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    norm_forward_kernel<T, true><<<static_cast<unsigned>(rows), row_threads(n), 0, stream_>>>(
        const_rows<T>(op, "x", x), static_cast<const T*>(weight.raw_data()), weight.stride(0),
        data_or_null<T>(bias), bias ? bias->stride(0) : 0, n, static_cast<T>(eps),
        rows_view<T>(op, "y", y), static_cast<T*>(mean.raw_data()),
        static_cast<T*>(rstd.raw_data()));
    check_launch(op);
  });
}

void CudaBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                     Tensor& dweight, Tensor* dbias, bool accumulate_params) {
  constexpr const char* op = "layernorm_backward";
  const Device here = device();
  check_input(op, x, here);
  check_like_x(op, "dy", dy, x, here);
  check_param(op, "weight", weight, x, here);
  check_row_stats(op, "mean", mean, x, here);
  check_row_stats(op, "rstd", rstd, x, here);
  check_like_x(op, "dx", dx, x, here);
  check_param(op, "dweight", dweight, x, here);
  if (dbias) check_param(op, "dbias", *dbias, x, here);
  const std::int64_t rows = rows_of(x), n = x.size(-1);
  if (n == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* saved_mean = data_or_null<T>(&mean);
    const T* saved_rstd = data_or_null<T>(&rstd);
    if (rows > 0) {
      norm_backward_dx_kernel<T, true><<<static_cast<unsigned>(rows), row_threads(n), 0, stream_>>>(
          const_rows<T>(op, "dy", dy), const_rows<T>(op, "x", x),
          static_cast<const T*>(weight.raw_data()), weight.stride(0), saved_mean, saved_rstd, n,
          rows_view<T>(op, "dx", dx));
      check_launch(op);
    }
    param_grads<T, true>(op, stream_, here, dy, x, saved_mean, saved_rstd, dweight, dbias,
                         accumulate_params);
  });
}

void CudaBackend::rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                                  Tensor& rstd) {
  constexpr const char* op = "rmsnorm_forward";
  const Device here = device();
  check_input(op, x, here);
  check_param(op, "weight", weight, x, here);
  check_like_x(op, "y", y, x, here);
  check_row_stats(op, "rstd", rstd, x, here);
  const std::int64_t rows = rows_of(x), n = x.size(-1);
  if (rows == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    norm_forward_kernel<T, false><<<static_cast<unsigned>(rows), row_threads(n), 0, stream_>>>(
        const_rows<T>(op, "x", x), static_cast<const T*>(weight.raw_data()), weight.stride(0),
        nullptr, 0, n, static_cast<T>(eps), rows_view<T>(op, "y", y), nullptr,
        static_cast<T*>(rstd.raw_data()));
    check_launch(op);
  });
}

void CudaBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& rstd, Tensor& dx, Tensor& dweight,
                                   bool accumulate_params) {
  constexpr const char* op = "rmsnorm_backward";
  const Device here = device();
  check_input(op, x, here);
  check_like_x(op, "dy", dy, x, here);
  check_param(op, "weight", weight, x, here);
  check_row_stats(op, "rstd", rstd, x, here);
  check_like_x(op, "dx", dx, x, here);
  check_param(op, "dweight", dweight, x, here);
  const std::int64_t rows = rows_of(x), n = x.size(-1);
  if (n == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* saved_rstd = data_or_null<T>(&rstd);
    if (rows > 0) {
      norm_backward_dx_kernel<T, false>
          <<<static_cast<unsigned>(rows), row_threads(n), 0, stream_>>>(
              const_rows<T>(op, "dy", dy), const_rows<T>(op, "x", x),
              static_cast<const T*>(weight.raw_data()), weight.stride(0), nullptr, saved_rstd, n,
              rows_view<T>(op, "dx", dx));
      check_launch(op);
    }
    param_grads<T, false>(op, stream_, here, dy, x, nullptr, saved_rstd, dweight, nullptr,
                          accumulate_params);
  });
}

}  // namespace megatron::cuda
