// CUDA causal depthwise conv1d with bias and SiLU (Mamba's short convolution), forward and
// backward; dweight and dbias are summed over rows in the CPU backend's chunk order (see
// cuda_common.cuh), so they do not depend on the launch shape.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/elementwise_math.h"
#include "backend/op_argument_checks.h"

namespace megatron::cuda {

namespace {

// A (Bt, S, C) view with a contiguous last dimension.
template <typename T>
struct Sequence {
  T* data;
  std::int64_t batch_stride, time_stride;
  __device__ T* row(std::int64_t b, std::int64_t t) const {
    return data + b * batch_stride + t * time_stride;
  }
};

template <typename T>
Sequence<T> sequence(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1)};
}

struct Dims {
  std::int64_t batch, seq, channels, kernel;
};

// bias[c] + sum_k w[c, k] * x[b, t - (K - 1) + k, c], taps before time 0 skipped; the CPU adds in
// this order too (bias first, then the taps in k order).
template <typename T>
__device__ T pre_activation(const Sequence<const T>& x, const T* weight, const T* bias,
                            const Dims& d, std::int64_t b, std::int64_t t, std::int64_t c) {
  T pre = bias[c];
  for (std::int64_t k = 0; k < d.kernel; ++k) {
    const std::int64_t source = t - (d.kernel - 1) + k;
    if (source < 0) continue;
    pre += weight[c * d.kernel + k] * x.row(b, source)[c];
  }
  return pre;
}

// One thread per (b, t, c).
template <typename T>
__global__ void conv_forward_kernel(Sequence<const T> x, const T* weight, const T* bias, Dims d,
                                    Sequence<T> y) {
  const std::int64_t total = d.batch * d.seq * d.channels;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t c = i % d.channels, r = i / d.channels;
    const std::int64_t b = r / d.seq, t = r % d.seq;
    y.row(b, t)[c] = math::silu(pre_activation(x, weight, bias, d, b, t, c));
  }
}

// dpre (rows, C) contiguous = dy * silu'(pre), pre recomputed: dx and the parameter sums all read
// it, and recomputing it per tap would cost K times the exps.
template <typename T>
__global__ void conv_dpre_kernel(Sequence<const T> dy, Sequence<const T> x, const T* weight,
                                 const T* bias, Dims d, T* dpre) {
  const std::int64_t total = d.batch * d.seq * d.channels;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t c = i % d.channels, r = i / d.channels;
    const std::int64_t b = r / d.seq, t = r % d.seq;
    const T pre = pre_activation(x, weight, bias, d, b, t, c);
    const T s = T(1) / (T(1) + math::exp_fast(-pre));
    dpre[i] = dy.row(b, t)[c] * s * (T(1) + pre * (T(1) - s));
  }
}

// dx[b, t, c] = sum_k w[c, k] * dpre[b, t + (K - 1) - k, c], taps past the end skipped.
template <typename T>
__global__ void conv_dx_kernel(const T* dpre, const T* weight, Dims d, Sequence<T> dx) {
  const std::int64_t total = d.batch * d.seq * d.channels;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t c = i % d.channels, r = i / d.channels;
    const std::int64_t b = r / d.seq, t = r % d.seq;
    T sum = T(0);
    for (std::int64_t k = 0; k < d.kernel; ++k) {
      const std::int64_t target = t + (d.kernel - 1) - k;
      if (target >= d.seq) continue;
      sum += weight[c * d.kernel + k] * dpre[(b * d.seq + target) * d.channels + c];
    }
    dx.row(b, t)[c] = sum;
  }
}

// Chunk partials of the parameter gradients, laid out partials[q][chunk][c] as the CPU's
// ChunkedColumnSums: quantity q < K is dweight[:, q] (sum of dpre * the tap's input), q = K is
// dbias (sum of dpre). Each thread adds one chunk's rows in row order from zero.
template <typename T>
__global__ void conv_param_chunks_kernel(const T* dpre, Sequence<const T> x, Dims d, T* partials) {
  const std::int64_t rows = d.batch * d.seq, chunks = chunks_of(rows);
  const std::int64_t total = (d.kernel + 1) * chunks * d.channels;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t c = i % d.channels, chunk = (i / d.channels) % chunks;
    const std::int64_t q = i / (d.channels * chunks);
    const std::int64_t end = min(rows, (chunk + 1) * kRowsPerChunk);
    T sum = T(0);
    for (std::int64_t r = chunk * kRowsPerChunk; r < end; ++r) {
      const T g = dpre[r * d.channels + c];
      if (q == d.kernel) {
        sum += g;
        continue;
      }
      const std::int64_t b = r / d.seq, t = r % d.seq;
      const std::int64_t source = t - (d.kernel - 1) + q;
      if (source < 0) continue;
      sum += g * x.row(b, source)[c];
    }
    partials[i] = sum;
  }
}

Dims dims_of(const Tensor& x, const Tensor& weight) {
  return {x.size(0), x.size(1), x.size(2), weight.size(1)};
}

}  // namespace

void CudaBackend::causal_conv1d_silu_forward(const Tensor& x, const Tensor& weight,
                                             const Tensor& bias, Tensor& y) {
  constexpr const char* op = "causal_conv1d_silu_forward";
  ops::check_causal_conv1d_args(op, x, weight, bias, {{"y", &y}}, device());
  const Dims d = dims_of(x, weight);
  const std::int64_t total = d.batch * d.seq * d.channels;
  if (total == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    conv_forward_kernel<T><<<grid_for(total), kThreads, 0, stream_>>>(
        sequence<const T>(x), static_cast<const T*>(weight.raw_data()),
        static_cast<const T*>(bias.raw_data()), d, sequence<T>(y));
    check_launch(op);
  });
}

void CudaBackend::causal_conv1d_silu_backward(const Tensor& dy, const Tensor& x,
                                              const Tensor& weight, const Tensor& bias, Tensor& dx,
                                              Tensor& dweight, Tensor& dbias,
                                              bool accumulate_params) {
  constexpr const char* op = "causal_conv1d_silu_backward";
  const Device here = device();
  ops::check_causal_conv1d_args(op, x, weight, bias, {{"dy", &dy}, {"dx", &dx}}, here);
  ops::check_param_grad(op, "dweight", dweight, "weight", weight, x, here);
  ops::check_param_grad(op, "dbias", dbias, "bias", bias, x, here);
  const Dims d = dims_of(x, weight);
  const std::int64_t rows = d.batch * d.seq, total = rows * d.channels;
  if (d.channels == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const std::int64_t chunks = chunks_of(rows);
    // Partials for every quantity; at least one chunk so an empty input still gets zero sums.
    Tensor partials = Tensor::empty({d.kernel + 1, std::max<std::int64_t>(chunks, 1), d.channels},
                                    x.dtype(), here);
    T* p = static_cast<T*>(partials.raw_data());
    if (total > 0) {
      Tensor dpre = Tensor::empty({rows, d.channels}, x.dtype(), here);
      T* g = static_cast<T*>(dpre.raw_data());
      conv_dpre_kernel<T><<<grid_for(total), kThreads, 0, stream_>>>(
          sequence<const T>(dy), sequence<const T>(x), static_cast<const T*>(weight.raw_data()),
          static_cast<const T*>(bias.raw_data()), d, g);
      check_launch(op);
      conv_dx_kernel<T><<<grid_for(total), kThreads, 0, stream_>>>(
          g, static_cast<const T*>(weight.raw_data()), d, sequence<T>(dx));
      check_launch(op);
      conv_param_chunks_kernel<T>
          <<<grid_for((d.kernel + 1) * chunks * d.channels), kThreads, 0, stream_>>>(
              g, sequence<const T>(x), d, p);
      check_launch(op);
    }
    // Chunk partials added in chunk order; dweight[c, k] is column c of quantity k, so its
    // elements are K apart in the (C, K) tensor.
    T* dw = static_cast<T*>(dweight.raw_data());
    for (std::int64_t k = 0; k < d.kernel; ++k) {
      reduce_chunks_kernel<T><<<grid_for(d.channels), kThreads, 0, stream_>>>(
          p + k * chunks * d.channels, chunks, d.channels, dw + k, d.kernel, accumulate_params);
      check_launch(op);
    }
    reduce_chunks_kernel<T><<<grid_for(d.channels), kThreads, 0, stream_>>>(
        p + d.kernel * chunks * d.channels, chunks, d.channels, static_cast<T*>(dbias.raw_data()),
        1, accumulate_params);
    check_launch(op);
  });
}

}  // namespace megatron::cuda
