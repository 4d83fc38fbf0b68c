// CUDA per-row ops of Mixture of Experts: scaling rows by their routing weights and the rows' dot
// products (the weights' gradient), one thread per element or per row.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/op_row_checks.h"

namespace megatron::cuda {

namespace {

template <typename T>
__global__ void scale_rows_kernel(const T* x, std::int64_t x_stride, const T* s, T* y,
                                  std::int64_t y_stride, std::int64_t rows, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < rows * n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t m = i / n, j = i % n;
    y[m * y_stride + j] = x[m * x_stride + j] * s[m];
  }
}

// One thread per row, summing in index order: the same order as the CPU's.
template <typename T>
__global__ void row_dots_kernel(const T* a, std::int64_t a_stride, const T* b,
                                std::int64_t b_stride, T* out, std::int64_t rows, std::int64_t n) {
  for (std::int64_t m = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; m < rows;
       m += std::int64_t(gridDim.x) * blockDim.x) {
    T sum = 0;
    for (std::int64_t j = 0; j < n; ++j)
      sum += a[m * a_stride + j] * b[m * b_stride + j];
    out[m] = sum;
  }
}

}  // namespace

void CudaBackend::scale_rows(const Tensor& x, const Tensor& scales, Tensor& y) {
  constexpr const char* op = "scale_rows";
  check_here(op, "x", x);
  check_here(op, "scales", scales);
  check_here(op, "y", y);
  ops::check_rows_and_vector(op, "x", x, "scales", scales, x);
  ops::check_rows_and_vector(op, "y", y, "scales", scales, x);
  if (x.numel() == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    scale_rows_kernel<T><<<grid_for(x.numel()), kThreads, 0, stream_>>>(
        x.data<T>(), x.stride(0), scales.data<T>(), y.data<T>(), y.stride(0), x.size(0), x.size(1));
    MEGATRON_CUDA_CHECK(cudaGetLastError());
  });
}

void CudaBackend::row_dots(const Tensor& a, const Tensor& b, Tensor& out) {
  constexpr const char* op = "row_dots";
  check_here(op, "a", a);
  check_here(op, "b", b);
  check_here(op, "out", out);
  ops::check_rows_and_vector(op, "a", a, "out", out, a);
  ops::check_rows_and_vector(op, "b", b, "out", out, a);
  if (a.size(0) == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    row_dots_kernel<T><<<grid_for(a.size(0)), kThreads, 0, stream_>>>(
        a.data<T>(), a.stride(0), b.data<T>(), b.stride(0), out.data<T>(), a.size(0), a.size(1));
    MEGATRON_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace megatron::cuda
