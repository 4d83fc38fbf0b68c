// cuda_allocator() for builds without the CUDA backend.
#include "megatron/error.h"
#include "tensor/device_allocators.h"

namespace megatron {

Allocator& cuda_allocator(int ordinal) {
  throw Error("cuda:" + std::to_string(ordinal) +
              " requested, but this build has no CUDA backend (configure with -DMEGATRON_CUDA=ON)");
}

}  // namespace megatron
