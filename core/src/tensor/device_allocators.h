// The per-device allocators behind allocator_for() (CUDA's lives in backend/cuda).
#pragma once

#include "megatron/tensor/allocator.h"

namespace megatron {

Allocator& cpu_allocator();
// Throws Error when CUDA is not compiled in or the ordinal is not a usable device.
Allocator& cuda_allocator(int ordinal);

}  // namespace megatron
