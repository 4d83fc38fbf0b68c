// cuda_status() for builds without the CUDA backend.
#include "megatron/backend/cuda_status.h"

namespace megatron {

CudaStatus cuda_status() {
  CudaStatus s;
  s.message = "this build has no CUDA backend (configure with -DMEGATRON_CUDA=ON and nvcc present)";
  return s;
}

std::optional<CudaMemoryInfo> cuda_memory_info(int) {
  return std::nullopt;
}

}  // namespace megatron
