// Host memory facts from /proc/meminfo, cgroup v2 files and getrlimit, and the per-rank budget.
#include "megatron/train/host_memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

namespace megatron::train {

namespace {

std::optional<double> read_number_file(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return std::nullopt;
  return value;
}

std::optional<double> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

// The process's cgroup v2 directory ("0::/path" in /proc/self/cgroup).
std::string cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return "";
}

std::optional<double> soft_limit(int resource) {
  rlimit limit{};
  if (getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<double>(limit.rlim_cur);
}

}  // namespace

HostMemoryFacts read_host_memory_facts() {
  HostMemoryFacts f;
  f.mem_available = mem_available();
  const std::string dir = cgroup_dir();
  if (!dir.empty()) {
    f.cgroup_limit = read_number_file(dir + "/memory.max");
    f.cgroup_current = read_number_file(dir + "/memory.current");
  }
  f.rlimit_as = soft_limit(RLIMIT_AS);
  f.rlimit_data = soft_limit(RLIMIT_DATA);
  if (const char* hook = std::getenv("MEGATRON_TEST_HOST_MEMORY")) {
    char* end = nullptr;
    const double value = std::strtod(hook, &end);
    if (end != hook && value > 0) f.override_bytes = value;
  }
  return f;
}

MemoryBudget host_memory_budget(const HostMemoryFacts& facts, int ranks_on_node) {
  MemoryBudget b;
  b.node_bytes = std::numeric_limits<double>::infinity();
  auto bound = [&](double& value, std::optional<double> candidate, const char* what) {
    if (candidate && *candidate < value) value = *candidate, b.source = what;
  };
  if (facts.override_bytes) {
    bound(b.node_bytes, facts.override_bytes, "MEGATRON_TEST_HOST_MEMORY");
  } else {
    bound(b.node_bytes, facts.mem_available, "MemAvailable");
    if (facts.cgroup_limit) {
      bound(b.node_bytes, std::max(0.0, *facts.cgroup_limit - facts.cgroup_current.value_or(0)),
            "cgroup memory.max");
    }
  }
  b.sharing = std::max(1, ranks_on_node);
  b.rank_bytes = b.node_bytes / b.sharing;
  bound(b.rank_bytes, facts.rlimit_as, "RLIMIT_AS (ulimit -v)");
  bound(b.rank_bytes, facts.rlimit_data, "RLIMIT_DATA (ulimit -d)");
  return b;
}

int ranks_sharing_device(int device_index, int device_count, int ranks_on_node) {
  if (device_count <= 0 || device_index < 0 || device_index >= ranks_on_node) return 1;
  return (ranks_on_node - 1 - device_index) / device_count + 1;
}

MemoryBudget device_memory_budget(const std::string& device, double free_bytes, int ranks_sharing) {
  MemoryBudget b;
  b.node_bytes = free_bytes;
  b.source = device + " free memory";
  if (const char* hook = std::getenv("MEGATRON_TEST_DEVICE_MEMORY")) {
    char* end = nullptr;
    const double value = std::strtod(hook, &end);
    if (end != hook && value > 0) b.node_bytes = value, b.source = "MEGATRON_TEST_DEVICE_MEMORY";
  }
  b.sharing = std::max(1, ranks_sharing);
  b.rank_bytes = b.node_bytes / b.sharing;
  return b;
}

}  // namespace megatron::train
