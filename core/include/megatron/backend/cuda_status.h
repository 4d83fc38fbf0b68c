// Whether this build has the CUDA backend and whether this machine can run it.
#pragma once

#include <optional>
#include <string>

namespace megatron {

struct CudaStatus {
  bool compiled = false;  // built with nvcc
  int device_count = 0;   // usable devices (0 when none, or when the driver cannot be used)
  std::string archs;      // compiled architectures, e.g. "sm_80 sm_90"
  std::string message;    // why there are no devices, or the devices' names
};

// Never throws: a machine without a GPU or driver reports 0 devices and the CUDA error text.
CudaStatus cuda_status();

struct CudaMemoryInfo {
  double free_bytes = 0;
  double total_bytes = 0;
};

// cudaMemGetInfo of device `index`, or nullopt without the CUDA backend or such a device. Never
// throws; the calling thread's current device is left as it was.
std::optional<CudaMemoryInfo> cuda_memory_info(int index);

}  // namespace megatron
