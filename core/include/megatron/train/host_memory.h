// How much memory this process may use, for the memory pre-flight. Host: what the kernel says is
// available, capped by the cgroup's limit and the process's resource limits, shared among the
// ranks on this node. Device: the free memory of the rank's CUDA device, shared among the ranks
// that use it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace megatron::train {

struct HostMemoryFacts {
  std::optional<double> mem_available;   // /proc/meminfo MemAvailable, bytes
  std::optional<double> cgroup_limit;    // cgroup v2 memory.max (none when "max")
  std::optional<double> cgroup_current;  // memory.current
  std::optional<double> rlimit_as;       // RLIMIT_AS soft limit (none when infinite)
  std::optional<double> rlimit_data;     // RLIMIT_DATA soft limit
  std::optional<double> override_bytes;  // MEGATRON_TEST_HOST_MEMORY (a test hook), for the node
};

struct MemoryBudget {
  double node_bytes =
      0;  // what the node's ranks (on a device: the device's ranks) may use together
  double rank_bytes = 0;  // node_bytes / those ranks (resource limits are per process)
  std::string source;     // which figure bounds it, e.g. "MemAvailable", "cgroup memory.max"
  int sharing = 1;        // the ranks node_bytes is shared by
};

// The facts of this machine and process.
HostMemoryFacts read_host_memory_facts();

// The budget from `facts` for one of `ranks_on_node` ranks: the smallest of MemAvailable and the
// cgroup's room (limit - current) shared among the ranks, and the process's own limits; the test
// hook replaces the machine figures. Nothing known: infinite (no check possible).
MemoryBudget host_memory_budget(const HostMemoryFacts& facts, int ranks_on_node);

// How many of the node's ranks use CUDA device `device_index` when `[runtime] device = "cuda"`
// gives local rank r the device r % device_count (ParallelState's rule); at least 1.
int ranks_sharing_device(int device_index, int device_count, int ranks_on_node);

// The budget of a rank whose tensors live on a CUDA device: the device's free memory
// (cudaMemGetInfo, or MEGATRON_TEST_DEVICE_MEMORY, a test hook, when set) shared among
// `ranks_sharing` ranks. `device` names it in the source ("cuda:0 free memory").
MemoryBudget device_memory_budget(const std::string& device, double free_bytes, int ranks_sharing);

}  // namespace megatron::train
