// Helpers shared by the CUDA backend's .cu files: error checks, the current-device guard, strided
// addressing in kernels, dtype dispatch and deterministic (fixed-order) block reductions.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend/op_checks.h"
#include "megatron/tensor/half.h"
#include "megatron/tensor/tensor.h"

namespace megatron::cuda {

// Throws Error "<what>: <cudaErrorName>: <text>" when err is not cudaSuccess.
void check_cuda(cudaError_t err, const char* what);
#define MEGATRON_CUDA_CHECK(expr) ::megatron::cuda::check_cuda((expr), #expr)
// Throws unless `ordinal` names a device this process can use, with the CUDA error text.
void require_device(int ordinal);
// After a kernel launch: reports a bad launch configuration under the op's name.
inline void check_launch(const char* op) {
  check_cuda(cudaGetLastError(), op);
}

// Makes `ordinal` the calling thread's current device for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int ordinal_;
};

// ---- strided addressing ----------------------------------------------------------------------

inline constexpr int kMaxDims = 8;

// Sizes and strides (in elements) of a view, with size-1 dimensions dropped and dimensions that
// are contiguous with each other merged, so a contiguous tensor is one dimension of stride 1.
struct Layout {
  int rank = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};
};

// All dimensions of `t` (element i in logical row-major order is at offset_at(layout, i)).
Layout layout_of(const char* op, const char* name, const Tensor& t);
// All dimensions but the last (row r starts at offset_at(layout, r); the last dimension is
// addressed with t.stride(-1)).
Layout rows_layout_of(const char* op, const char* name, const Tensor& t);
// Number of rows (product of all dimensions but the last) of a (..., N) tensor.
std::int64_t rows_of(const Tensor& t);

__device__ __forceinline__ std::int64_t offset_at(const Layout& layout, std::int64_t i) {
  std::int64_t offset = 0;
  for (int d = layout.rank - 1; d >= 0; --d) {
    const std::int64_t n = layout.sizes[d];
    offset += (i % n) * layout.strides[d];
    i /= n;
  }
  return offset;
}

// A (..., N) view for row kernels.
// A (..., N) view: where row r starts and the step between its elements.
template <typename T>
struct Rows {
  T* base;
  Layout rows;
  std::int64_t step;
  __device__ T* row(std::int64_t r) const { return base + offset_at(rows, r); }
};

template <typename T>
inline Rows<T> rows_view(const char* op, const char* name, const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), rows_layout_of(op, name, t),
          t.size(-1) > 1 ? t.stride(-1) : 1};
}

template <typename T>
inline Rows<const T> const_rows(const char* op, const char* name, const Tensor& t) {
  return {static_cast<const T*>(t.raw_data()), rows_layout_of(op, name, t),
          t.size(-1) > 1 ? t.stride(-1) : 1};
}

// ---- element types -------------------------------------------------------------------------

// The type arithmetic happens in: fp32 for fp32/bf16/fp16 storage, fp64 for fp64.
template <typename T>
struct AccumulateType {
  using type = float;
};
template <>
struct AccumulateType<double> {
  using type = double;
};
template <typename T>
using acc_t = typename AccumulateType<T>::type;

// -inf of T in device code (std::numeric_limits is host-only without relaxed constexpr).
template <typename T>
__host__ __device__ __forceinline__ T negative_infinity() {
  return -static_cast<T>(HUGE_VALF);
}

// Reads a stored element as its arithmetic type, and rounds a result back to storage.
template <typename T>
__device__ __forceinline__ acc_t<T> load(const T* p) {
  return static_cast<acc_t<T>>(*p);
}
template <typename T>
__device__ __forceinline__ void store(T* p, acc_t<T> v) {
  *p = T(v);
}

// Calls fn.template operator()<T>() for T = float or double.
template <typename Fn>
void dispatch_float(const char* op, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn.template operator()<float>();
      return;
    case DType::f64:
      fn.template operator()<double>();
      return;
    default:
      ops::fail(op,
                "unsupported dtype " + std::string(dtype_name(dtype)) + " (float32 or float64)");
  }
}

// Calls fn.template operator()<T>() for T = float, double, bf16 or f16.
template <typename Fn>
void dispatch_floating(const char* op, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn.template operator()<float>();
      return;
    case DType::f64:
      fn.template operator()<double>();
      return;
    case DType::bf16:
      fn.template operator()<bf16>();
      return;
    case DType::f16:
      fn.template operator()<f16>();
      return;
    default:
      ops::fail(op, "unsupported dtype " + std::string(dtype_name(dtype)) +
                        " (float32, float64, bfloat16 or float16)");
  }
}

// ---- launches --------------------------------------------------------------------------------

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (capped: each thread then loops).
inline unsigned grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

// Threads for a kernel with one block per row of n elements: enough for the row, at most 512
// (a multiple of 32, as block_sum needs).
inline int row_threads(std::int64_t n) {
  int threads = 32;
  while (threads < 512 && threads < n)
    threads *= 2;
  return threads;
}

// ---- deterministic reductions ----------------------------------------------------------------
// The butterfly pattern and the block layout are fixed, so a given launch shape adds the same
// numbers in the same order on every run.

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int delta = 16; delta > 0; delta /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, delta);
  return v;
}

template <typename A>
__device__ __forceinline__ A warp_max(A v) {
  for (int delta = 16; delta > 0; delta /= 2) {
    const A other = __shfl_xor_sync(0xffffffffu, v, delta);
    v = other > v ? other : v;
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values; the call ends with a barrier so scratch can be reused right away.
template <typename A>
__device__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A total = lane < warps ? scratch[lane] : A(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}

template <typename A>
__device__ A block_max(A v, A* scratch, A lowest) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A best = lane < warps ? scratch[lane] : lowest;
  best = warp_max(best);
  __syncthreads();
  return best;
}

// ---- column sums over rows, in the CPU backend's order ----------------------------------------
// Rows are cut into chunks of kRowsPerChunk (ChunkedColumnSums::kRowsPerChunk on the CPU); each
// chunk's rows are added in order from zero, then the chunk partials are added in chunk order,
// so parameter gradients come out with the same bits as on the CPU.

inline constexpr std::int64_t kRowsPerChunk = 32;

__host__ __device__ inline std::int64_t chunks_of(std::int64_t rows) {
  return (rows + kRowsPerChunk - 1) / kRowsPerChunk;
}

// out[j] (+)= sum over chunks c of partials[c * n + j], in chunk order; out has stride out_stride.
template <typename T>
__global__ void reduce_chunks_kernel(const T* partials, std::int64_t chunks, std::int64_t n, T* out,
                                     std::int64_t out_stride, bool accumulate) {
  for (std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; j < n;
       j += std::int64_t(gridDim.x) * blockDim.x) {
    T sum = T(0);
    for (std::int64_t c = 0; c < chunks; ++c)
      sum += partials[c * n + j];
    T* o = out + j * out_stride;
    *o = accumulate ? *o + sum : sum;
  }
}

}  // namespace megatron::cuda
