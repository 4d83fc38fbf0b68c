// The CUDA caching allocator: cudaMalloc'd blocks, freed blocks kept per (rounded) size for reuse.
//
// A freed block goes back to the cache at once, without waiting for kernels that may still use
// it: every op runs on the backend's single compute stream, so work that later reuses the block
// is queued behind that use. Memory handed to another stream (communication) must be kept alive
// by its user until that stream is done with it (record an event and wait on it).
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "megatron/error.h"
#include "megatron/tensor/allocator.h"
#include "tensor/device_allocators.h"

namespace megatron {

namespace {

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int ordinal) : ordinal_(ordinal) {}

  void* allocate(std::size_t bytes) override {
    const std::size_t size = round_up(bytes);
    {
      std::lock_guard lock(mutex_);
      auto it = cache_.find(size);
      if (it != cache_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        in_use_ += size;
        return p;
      }
    }
    cuda::DeviceGuard guard(ordinal_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cached();
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw Error("cannot allocate " + std::to_string(bytes) + " bytes on cuda:" +
                  std::to_string(ordinal_) + " (" + std::to_string(bytes_in_use()) +
                  " bytes in use): " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
    }
    std::lock_guard lock(mutex_);
    in_use_ += size;
    return p;
  }

  void deallocate(void* ptr, std::size_t bytes) override {
    if (!ptr) return;
    const std::size_t size = round_up(bytes);
    std::lock_guard lock(mutex_);
    in_use_ -= size;
    cache_[size].push_back(ptr);
    cached_ += size;
  }

  void release_cached() override {
    std::lock_guard lock(mutex_);
    if (cache_.empty()) return;
    cuda::DeviceGuard guard(ordinal_);
    // cudaFree waits for the device, so blocks still read by queued kernels are safe to free.
    for (auto& [size, blocks] : cache_) {
      for (void* p : blocks)
        cudaFree(p);
    }
    cache_.clear();
    cached_ = 0;
  }

  std::size_t bytes_in_use() const override {
    std::lock_guard lock(mutex_);
    return in_use_;
  }
  std::size_t bytes_cached() const override {
    std::lock_guard lock(mutex_);
    return cached_;
  }

 private:
  // Rounding to 512 bytes lets slightly different sizes share cached blocks; a zero-byte tensor
  // still gets a block (and a valid pointer).
  static std::size_t round_up(std::size_t bytes) {
    constexpr std::size_t granule = 512;
    const std::size_t n = bytes == 0 ? 1 : bytes;
    return (n + granule - 1) / granule * granule;
  }

  int ordinal_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> cache_;
  std::size_t in_use_ = 0;
  std::size_t cached_ = 0;
};

}  // namespace

Allocator& cuda_allocator(int ordinal) {
  static std::mutex mutex;
  // Leaked on purpose: tensors held in static objects may be freed after main() returns.
  static std::map<int, CudaCachingAllocator*> allocators;
  std::lock_guard lock(mutex);
  auto it = allocators.find(ordinal);
  if (it != allocators.end()) return *it->second;
  cuda::require_device(ordinal);
  auto* allocator = new CudaCachingAllocator(ordinal);
  allocators.emplace(ordinal, allocator);
  return *allocator;
}

}  // namespace megatron
