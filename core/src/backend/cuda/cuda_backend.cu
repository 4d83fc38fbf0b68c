// CUDA backend: device lookup, the compute stream and events, strided addressing, and the memory
// ops (copy between host and device, fill, cast, Philox random fills).
#include "backend/cuda/cuda_backend.h"

#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "megatron/backend/cuda_status.h"
#include "megatron/tensor/philox.h"

namespace megatron {

namespace cuda {

void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw Error(std::string(what) + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

void require_device(int ordinal) {
  const std::string name = "cuda:" + std::to_string(ordinal);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(name + " requested, but CUDA cannot be used on this machine: " +
                cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
  }
  if (ordinal < 0 || ordinal >= count) {
    throw Error(name + " requested, but this machine has " + std::to_string(count) +
                " CUDA device(s)");
  }
}

DeviceGuard::DeviceGuard(int ordinal) : ordinal_(ordinal) {
  MEGATRON_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != ordinal_) MEGATRON_CUDA_CHECK(cudaSetDevice(ordinal_));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != ordinal_) cudaSetDevice(previous_);
}

// ---- layouts -------------------------------------------------------------------------------

namespace {

Layout coalesce(const char* op, const char* name, const Tensor& t, int dims) {
  // Walk from the innermost dimension out, merging a dimension into the one inside it when it
  // steps exactly over it.
  std::int64_t sizes[64], strides[64];
  int rank = 0;
  for (int d = dims - 1; d >= 0; --d) {
    const std::int64_t size = t.shape()[d], stride = t.strides()[d];
    if (size == 1) continue;
    if (rank > 0 && stride == strides[rank - 1] * sizes[rank - 1]) {
      sizes[rank - 1] *= size;
      continue;
    }
    if (rank == 64) break;
    sizes[rank] = size;
    strides[rank] = stride;
    ++rank;
  }
  if (rank > kMaxDims) {
    ops::fail(op, std::string(name) + " " + t.describe() + " has " + std::to_string(rank) +
                      " non-mergeable strided dimensions; the CUDA backend handles at most " +
                      std::to_string(kMaxDims) + " (make it contiguous first)");
  }
  Layout layout;
  layout.rank = rank;
  for (int i = 0; i < rank; ++i) {
    layout.sizes[i] = sizes[rank - 1 - i];
    layout.strides[i] = strides[rank - 1 - i];
  }
  return layout;
}

}  // namespace

Layout layout_of(const char* op, const char* name, const Tensor& t) {
  return coalesce(op, name, t, t.dim());
}

Layout rows_layout_of(const char* op, const char* name, const Tensor& t) {
  return coalesce(op, name, t, t.dim() > 0 ? t.dim() - 1 : 0);
}

std::int64_t rows_of(const Tensor& t) {
  std::int64_t rows = 1;
  for (int d = 0; d + 1 < t.dim(); ++d)
    rows *= t.shape()[d];
  return rows;
}

// ---- events ----------------------------------------------------------------------------------

CudaEvent::CudaEvent(int ordinal) : ordinal_(ordinal) {
  DeviceGuard guard(ordinal_);
  MEGATRON_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

void CudaEvent::record(cudaStream_t stream) {
  DeviceGuard guard(ordinal_);
  MEGATRON_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void CudaEvent::synchronize() const {
  MEGATRON_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool CudaEvent::ready() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check_cuda(err, "cudaEventQuery");
  return true;
}

// ---- the backend object ----------------------------------------------------------------------

CudaBackend::CudaBackend(int ordinal) : ordinal_(ordinal) {
  require_device(ordinal_);
  DeviceGuard guard(ordinal_);
  // Non-blocking: the legacy default stream (used by code outside the backend) does not
  // serialise against our work.
  MEGATRON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::synchronize() {
  DeviceGuard guard(ordinal_);
  MEGATRON_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::wait_event(const CudaEvent& event) {
  DeviceGuard guard(ordinal_);
  MEGATRON_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0));
}

void CudaBackend::wait_stream(cudaStream_t other) {
  CudaEvent event(ordinal_);
  event.record(other);
  wait_event(event);
}

void CudaBackend::check_here(const char* op, const char* name, const Tensor& t) const {
  ops::check_device(op, name, t, device());
}

// ---- memory ops ------------------------------------------------------------------------------

namespace {

// Same-size unsigned integer for moving elements of any dtype bit for bit.
template <std::size_t Bytes>
struct Bits;
template <>
struct Bits<1> {
  using type = std::uint8_t;
};
template <>
struct Bits<2> {
  using type = std::uint16_t;
};
template <>
struct Bits<4> {
  using type = std::uint32_t;
};
template <>
struct Bits<8> {
  using type = std::uint64_t;
};

template <typename U>
__global__ void strided_copy_kernel(const U* src, Layout src_layout, U* dst, Layout dst_layout,
                                    std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[offset_at(dst_layout, i)] = src[offset_at(src_layout, i)];
  }
}

template <typename U>
__global__ void fill_kernel(U* dst, Layout layout, U value, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[offset_at(layout, i)] = value;
  }
}

// Calls fn.template operator()<U>() with U the unsigned type as wide as one element.
template <typename Fn>
void dispatch_bits(std::size_t element_size, Fn&& fn) {
  switch (element_size) {
    case 1:
      fn.template operator()<Bits<1>::type>();
      return;
    case 2:
      fn.template operator()<Bits<2>::type>();
      return;
    case 4:
      fn.template operator()<Bits<4>::type>();
      return;
    default:
      fn.template operator()<Bits<8>::type>();
      return;
  }
}

// Element-by-element copy between two views on the current device (same shape and dtype).
void device_strided_copy(const char* op, const Tensor& src, Tensor& dst, cudaStream_t stream) {
  const std::int64_t n = src.numel();
  if (n == 0) return;
  const Layout sl = layout_of(op, "src", src), dl = layout_of(op, "dst", dst);
  dispatch_bits(src.element_size(), [&]<typename U>() {
    strided_copy_kernel<U><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const U*>(src.raw_data()), sl, static_cast<U*>(dst.raw_data()), dl, n);
  });
  check_launch(op);
}

}  // namespace

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  constexpr const char* op = "copy";
  ops::check_defined(op, "src", src);
  ops::check_defined(op, "dst", dst);
  ops::check_same_shape(op, "dst", dst, "src", src);
  ops::check_same_dtype(op, "dst", dst, "src", src);
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"src", &src}, {"dst", &dst}}) {
    if (!t->device().is_cpu() && t->device() != device()) {
      ops::fail(op,
                std::string(name) + " " + t->describe() + " must be on cpu or " + device().str());
    }
  }
  if (src.numel() == 0) return;
  const bool src_host = src.device().is_cpu(), dst_host = dst.device().is_cpu();
  if (src_host && dst_host) {
    backend_for(Device::cpu()).copy(src, dst);
    return;
  }
  DeviceGuard guard(ordinal_);
  if (!src_host && !dst_host) {
    if (src.is_contiguous() && dst.is_contiguous()) {
      MEGATRON_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(),
                                          cudaMemcpyDeviceToDevice, stream_));
    } else {
      device_strided_copy(op, src, dst, stream_);
    }
    return;
  }
  if (src_host) {
    // Host -> device: one contiguous transfer, then scatter on the device if dst is strided.
    const Tensor host_src = src.contiguous();
    Tensor staging = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), device());
    MEGATRON_CUDA_CHECK(cudaMemcpyAsync(staging.raw_data(), host_src.raw_data(), host_src.nbytes(),
                                        cudaMemcpyHostToDevice, stream_));
    if (!dst.is_contiguous()) device_strided_copy(op, staging, dst, stream_);
    // The host buffer may be a temporary: it must outlive the transfer.
    MEGATRON_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  // Device -> host: gather on the device if src is strided, one transfer, then scatter on the host.
  Tensor gathered = src;
  if (!src.is_contiguous()) {
    gathered = Tensor::empty(src.shape(), src.dtype(), device());
    device_strided_copy(op, src, gathered, stream_);
  }
  Tensor host_dst = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype());
  MEGATRON_CUDA_CHECK(cudaMemcpyAsync(host_dst.raw_data(), gathered.raw_data(), gathered.nbytes(),
                                      cudaMemcpyDeviceToHost, stream_));
  // The caller reads the host memory as soon as copy() returns.
  MEGATRON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (!dst.is_contiguous()) backend_for(Device::cpu()).copy(host_dst, dst);
}

void CudaBackend::fill(Tensor& t, double value) {
  constexpr const char* op = "fill";
  check_here(op, "t", t);
  const std::int64_t n = t.numel();
  if (n == 0) return;
  // The element's bytes, converted exactly as the CPU backend converts.
  std::uint64_t pattern = 0;
  store_from_double(&pattern, t.dtype(), 0, value);
  DeviceGuard guard(ordinal_);
  if (pattern == 0 && t.is_contiguous()) {
    MEGATRON_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), stream_));
    return;
  }
  const Layout layout = layout_of(op, "t", t);
  dispatch_bits(t.element_size(), [&]<typename U>() {
    U bits;
    std::memcpy(&bits, &pattern, sizeof bits);
    fill_kernel<U>
        <<<grid_for(n), kThreads, 0, stream_>>>(static_cast<U*>(t.raw_data()), layout, bits, n);
  });
  check_launch(op);
}

namespace {

// Through double, like the CPU: exact for every source value, then one rounding (for bf16/f16
// through float, as store_from_double does).
template <typename S, typename D>
__global__ void cast_kernel(const S* src, Layout src_layout, D* dst, Layout dst_layout,
                            std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const double v = static_cast<double>(static_cast<acc_t<S>>(src[offset_at(src_layout, i)]));
    if constexpr (std::is_same_v<D, double>) {
      dst[offset_at(dst_layout, i)] = v;
    } else {
      dst[offset_at(dst_layout, i)] = D(static_cast<float>(v));
    }
  }
}

// The value is computed in float exactly as the CPU backend computes it, then stored.
template <typename T>
__device__ __forceinline__ void store_float(T* p, float v) {
  if constexpr (std::is_same_v<T, double>) {
    *p = static_cast<double>(v);
  } else {
    *p = T(v);
  }
}

template <typename T>
__global__ void normal_kernel(T* dst, Layout layout, std::int64_t n, float mean, float std,
                              std::uint64_t seed, std::uint64_t offset) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = mean + std * philox_normal_at(seed, offset, static_cast<std::uint64_t>(i));
    store_float(dst + offset_at(layout, i), v);
  }
}

template <typename T>
__global__ void uniform_kernel(T* dst, Layout layout, std::int64_t n, float low, float high,
                               std::uint64_t seed, std::uint64_t offset) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float u = 1.0f - philox_uniform_at(seed, offset, static_cast<std::uint64_t>(i));
    store_float(dst + offset_at(layout, i), low + (high - low) * u);
  }
}

}  // namespace

void CudaBackend::cast(const Tensor& src, Tensor& dst) {
  constexpr const char* op = "cast";
  check_here(op, "src", src);
  check_here(op, "dst", dst);
  ops::check_same_shape(op, "dst", dst, "src", src);
  ops::check_dtype(op, "src", src, {DType::f32, DType::f64, DType::bf16, DType::f16});
  ops::check_dtype(op, "dst", dst, {DType::f32, DType::f64, DType::bf16, DType::f16});
  const std::int64_t n = src.numel();
  if (n == 0) return;
  const Layout sl = layout_of(op, "src", src), dl = layout_of(op, "dst", dst);
  DeviceGuard guard(ordinal_);
  dispatch_floating(op, src.dtype(), [&]<typename S>() {
    dispatch_floating(op, dst.dtype(), [&]<typename D>() {
      cast_kernel<S, D><<<grid_for(n), kThreads, 0, stream_>>>(
          static_cast<const S*>(src.raw_data()), sl, static_cast<D*>(dst.raw_data()), dl, n);
    });
  });
  check_launch(op);
}

void CudaBackend::fill_normal(Tensor& t, float mean, float std, std::uint64_t seed,
                              std::uint64_t offset) {
  constexpr const char* op = "fill_normal";
  check_here(op, "t", t);
  const std::int64_t n = t.numel();
  if (n == 0) return;
  const Layout layout = layout_of(op, "t", t);
  DeviceGuard guard(ordinal_);
  dispatch_floating(op, t.dtype(), [&]<typename T>() {
    normal_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(static_cast<T*>(t.raw_data()), layout,
                                                            n, mean, std, seed, offset);
  });
  check_launch(op);
}

void CudaBackend::fill_uniform(Tensor& t, float low, float high, std::uint64_t seed,
                               std::uint64_t offset) {
  constexpr const char* op = "fill_uniform";
  check_here(op, "t", t);
  const std::int64_t n = t.numel();
  if (n == 0) return;
  const Layout layout = layout_of(op, "t", t);
  DeviceGuard guard(ordinal_);
  dispatch_floating(op, t.dtype(), [&]<typename T>() {
    uniform_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(static_cast<T*>(t.raw_data()), layout,
                                                             n, low, high, seed, offset);
  });
  check_launch(op);
}

}  // namespace cuda

// ---- entry points --------------------------------------------------------------------------

bool cuda_backend_available() {
  // cuda_status() also launches a kernel, proving the compiled architectures run here.
  static const bool available = cuda_status().device_count > 0;
  return available;
}

Backend& cuda_backend(int ordinal) {
  static std::mutex mutex;
  // Leaked on purpose: streams and handles must not be torn down after the CUDA runtime.
  static std::map<int, cuda::CudaBackend*> backends;
  std::lock_guard lock(mutex);
  auto it = backends.find(ordinal);
  if (it != backends.end()) return *it->second;
  auto* backend = new cuda::CudaBackend(ordinal);
  backends.emplace(ordinal, backend);
  return *backend;
}

}  // namespace megatron
