// Device memory allocators with a per-device cache of freed blocks, so training steps that
// allocate the same sizes every iteration do not go back to the system each time.
#pragma once

#include <cstddef>

#include "megatron/tensor/device.h"

namespace megatron {

// Every CPU allocation is aligned to this (one cache line, the widest AVX-512 load).
inline constexpr std::size_t kCpuAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator();
  // Throws Error when the memory cannot be had (naming the size and the device).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
  // Returns cached blocks to the system.
  virtual void release_cached() = 0;
  virtual std::size_t bytes_in_use() const = 0;
  virtual std::size_t bytes_cached() const = 0;
};

// The caching allocator of a device (created on first use, lives until exit). Not for meta.
Allocator& allocator_for(Device device);

}  // namespace megatron
