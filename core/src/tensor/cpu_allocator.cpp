// The CPU caching allocator: 64-byte aligned blocks, freed blocks kept per exact size for reuse.
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "megatron/error.h"
#include "megatron/tensor/allocator.h"
#include "tensor/device_allocators.h"

namespace megatron {

Allocator::~Allocator() = default;

namespace {

class CpuCachingAllocator final : public Allocator {
 public:
  ~CpuCachingAllocator() override { release_cached(); }

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
    void* p = std::aligned_alloc(kCpuAlignment, size);
    if (!p) {
      release_cached();
      p = std::aligned_alloc(kCpuAlignment, size);
    }
    if (!p) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
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
    for (auto& [size, blocks] : cache_) {
      for (void* p : blocks) std::free(p);
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
  // aligned_alloc needs a multiple of the alignment; a zero-byte tensor still gets a block.
  static std::size_t round_up(std::size_t bytes) {
    const std::size_t n = bytes == 0 ? 1 : bytes;
    return (n + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  }

  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> cache_;
  std::size_t in_use_ = 0;
  std::size_t cached_ = 0;
};

}  // namespace

Allocator& cpu_allocator() {
  // Leaked on purpose: tensors held in static objects may be freed after main() returns.
  static auto* allocator = new CpuCachingAllocator();
  return *allocator;
}

Allocator& allocator_for(Device device) {
  switch (device.type) {
    case Device::Type::cpu:
      return cpu_allocator();
    case Device::Type::cuda:
      return cuda_allocator(device.index);
    case Device::Type::meta:
      break;
  }
  throw Error("the meta device has no allocator: meta tensors hold no memory");
}

}  // namespace megatron
