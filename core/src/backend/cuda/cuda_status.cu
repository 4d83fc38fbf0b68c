// Queries the CUDA runtime for usable devices; compiled only when the CUDA backend is enabled.
#include <cuda_runtime.h>

#include "megatron/backend/cuda_status.h"

namespace megatron {

namespace {
__global__ void touch_kernel(int* out) {
  *out = 1;
}
}  // namespace

CudaStatus cuda_status() {
  CudaStatus s;
  s.compiled = true;
  s.archs = MEGATRON_CUDA_ARCHS;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    s.message = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return s;
  }
  s.device_count = count;
  if (count == 0) {
    s.message = "no CUDA devices";
    return s;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      s.message += (i ? ", " : "") + std::string("cuda:") + std::to_string(i) + " " + prop.name +
                   " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
    }
  }
  // A launch proves the compiled architectures run on this device.
  int* flag = nullptr;
  if (cudaMalloc(&flag, sizeof(int)) == cudaSuccess) {
    touch_kernel<<<1, 1>>>(flag);
    const cudaError_t launch = cudaDeviceSynchronize();
    if (launch != cudaSuccess) {
      s.message += std::string("; kernel launch failed: ") + cudaGetErrorString(launch);
      s.device_count = 0;
    }
    cudaFree(flag);
  }
  return s;
}

std::optional<CudaMemoryInfo> cuda_memory_info(int index) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(index) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return CudaMemoryInfo{static_cast<double>(free_bytes), static_cast<double>(total_bytes)};
}

}  // namespace megatron
