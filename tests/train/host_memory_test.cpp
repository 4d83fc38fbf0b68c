// The memory pre-flight's budget: the smallest of what the machine, the cgroup and the process's
// limits allow, shared among the node's ranks; a CUDA device's free memory shared among its
// ranks; and the live facts of this machine are sane.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "megatron/train/host_memory.h"

namespace megatron::train {
namespace {

constexpr double GiB = 1024.0 * 1024 * 1024;

TEST(HostMemoryBudget, MemAvailableIsSharedAmongTheNodesRanks) {
  HostMemoryFacts f;
  f.mem_available = 24 * GiB;
  const MemoryBudget b = host_memory_budget(f, 4);
  EXPECT_EQ(b.node_bytes, 24 * GiB);
  EXPECT_EQ(b.rank_bytes, 6 * GiB);
  EXPECT_EQ(b.source, "MemAvailable");
}

TEST(HostMemoryBudget, TheCgroupsRoomAndProcessLimitsBoundIt) {
  HostMemoryFacts f;
  f.mem_available = 24 * GiB;
  f.cgroup_limit = 16 * GiB;
  f.cgroup_current = 4 * GiB;
  MemoryBudget b = host_memory_budget(f, 2);
  EXPECT_EQ(b.node_bytes, 12 * GiB);
  EXPECT_EQ(b.rank_bytes, 6 * GiB);
  EXPECT_EQ(b.source, "cgroup memory.max");
  f.rlimit_as = 5 * GiB;  // per process
  b = host_memory_budget(f, 2);
  EXPECT_EQ(b.rank_bytes, 5 * GiB);
  EXPECT_EQ(b.source, "RLIMIT_AS (ulimit -v)");
  f.rlimit_data = 3 * GiB;
  EXPECT_EQ(host_memory_budget(f, 2).rank_bytes, 3 * GiB);
  f.override_bytes = 1 * GiB;  // the test hook replaces the machine's figures, not the limits
  b = host_memory_budget(f, 2);
  EXPECT_EQ(b.node_bytes, 1 * GiB);
  EXPECT_EQ(b.rank_bytes, 0.5 * GiB);
  EXPECT_EQ(b.source, "MEGATRON_TEST_HOST_MEMORY");
}

TEST(HostMemoryBudget, NothingKnownMeansNoLimit) {
  const MemoryBudget b = host_memory_budget(HostMemoryFacts{}, 1);
  EXPECT_TRUE(std::isinf(b.rank_bytes));
  EXPECT_TRUE(b.source.empty());
}

// /proc/meminfo's `key` line in bytes, read here independently of host_memory.cpp.
double meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  double kib = 0;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name == key + ":") return kib * 1024;
  }
  return -1;
}

TEST(HostMemoryBudget, ThisMachinesFactsAreTheKernelsFigures) {
  const double before = meminfo_bytes("MemAvailable");
  const HostMemoryFacts f = read_host_memory_facts();
  const double after = meminfo_bytes("MemAvailable");
  ASSERT_GT(before, 0) << "/proc/meminfo has no MemAvailable";
  ASSERT_TRUE(f.mem_available.has_value()) << "/proc/meminfo has no MemAvailable";
  // The figure moves between reads: within the two readings around it, give or take 64 MiB.
  EXPECT_GE(*f.mem_available, std::min(before, after) - 64 * 1024.0 * 1024);
  EXPECT_LE(*f.mem_available, std::max(before, after) + 64 * 1024.0 * 1024);
  EXPECT_LE(*f.mem_available, meminfo_bytes("MemTotal"));
  rlimit as{}, data{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &as), 0);
  ASSERT_EQ(getrlimit(RLIMIT_DATA, &data), 0);
  EXPECT_EQ(f.rlimit_as.has_value(), as.rlim_cur != RLIM_INFINITY);
  if (f.rlimit_as) {
    EXPECT_EQ(*f.rlimit_as, static_cast<double>(as.rlim_cur));
  }
  EXPECT_EQ(f.rlimit_data.has_value(), data.rlim_cur != RLIM_INFINITY);
  if (f.rlimit_data) {
    EXPECT_EQ(*f.rlimit_data, static_cast<double>(data.rlim_cur));
  }
  const MemoryBudget b = host_memory_budget(f, 1);
  EXPECT_GT(b.rank_bytes, 0);
  EXPECT_LE(b.rank_bytes, *f.mem_available);
}

TEST(DeviceMemoryBudget, RanksOfANodeShareDevicesRoundRobin) {
  // local rank r uses device r % devices: 8 ranks on 8 GPUs one each, 8 on 2 four each, 3 on 2
  // two on device 0 and one on device 1.
  EXPECT_EQ(ranks_sharing_device(0, 8, 8), 1);
  EXPECT_EQ(ranks_sharing_device(7, 8, 8), 1);
  EXPECT_EQ(ranks_sharing_device(1, 2, 8), 4);
  EXPECT_EQ(ranks_sharing_device(0, 2, 3), 2);
  EXPECT_EQ(ranks_sharing_device(1, 2, 3), 1);
  EXPECT_EQ(ranks_sharing_device(3, 4, 1), 1);  // cuda:3 named explicitly by a single rank
  EXPECT_EQ(ranks_sharing_device(0, 0, 4), 1);
}

TEST(DeviceMemoryBudget, FreeMemoryIsSharedByTheDevicesRanks) {
  unsetenv("MEGATRON_TEST_DEVICE_MEMORY");
  MemoryBudget b = device_memory_budget("cuda:1", 78 * GiB, 2);
  EXPECT_EQ(b.node_bytes, 78 * GiB);
  EXPECT_EQ(b.rank_bytes, 39 * GiB);
  EXPECT_EQ(b.sharing, 2);
  EXPECT_EQ(b.source, "cuda:1 free memory");
  setenv("MEGATRON_TEST_DEVICE_MEMORY", "4294967296", 1);
  b = device_memory_budget("cuda:0", 78 * GiB, 1);
  unsetenv("MEGATRON_TEST_DEVICE_MEMORY");
  EXPECT_EQ(b.rank_bytes, 4 * GiB);
  EXPECT_EQ(b.source, "MEGATRON_TEST_DEVICE_MEMORY");
}

}  // namespace
}  // namespace megatron::train
