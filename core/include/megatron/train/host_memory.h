// How much host memory this process may use, for the memory pre-flight: what the kernel says is
// available, capped by the cgroup's limit and the process's resource limits, shared among the
// ranks on this node.
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

struct HostMemoryBudget {
  double node_bytes = 0;  // what the node's ranks may use together
  double rank_bytes = 0;  // node_bytes / ranks on the node (resource limits are per process)
  std::string source;     // which figure bounds it, e.g. "MemAvailable", "cgroup memory.max"
};

// The facts of this machine and process.
HostMemoryFacts read_host_memory_facts();

// The budget from `facts` for one of `ranks_on_node` ranks: the smallest of MemAvailable and the
// cgroup's room (limit - current) shared among the ranks, and the process's own limits; the test
// hook replaces the machine figures. Nothing known: infinite (no check possible).
HostMemoryBudget host_memory_budget(const HostMemoryFacts& facts, int ranks_on_node);

}  // namespace megatron::train
