// The memory pre-flight's budget: the smallest of what the machine, the cgroup and the process's
// limits allow, shared among the node's ranks; and the live facts of this machine are sane.
#include <gtest/gtest.h>

#include <cmath>

#include "megatron/train/host_memory.h"

namespace megatron::train {
namespace {

constexpr double GiB = 1024.0 * 1024 * 1024;

TEST(HostMemoryBudget, MemAvailableIsSharedAmongTheNodesRanks) {
  HostMemoryFacts f;
  f.mem_available = 24 * GiB;
  const HostMemoryBudget b = host_memory_budget(f, 4);
  EXPECT_EQ(b.node_bytes, 24 * GiB);
  EXPECT_EQ(b.rank_bytes, 6 * GiB);
  EXPECT_EQ(b.source, "MemAvailable");
}

TEST(HostMemoryBudget, TheCgroupsRoomAndProcessLimitsBoundIt) {
  HostMemoryFacts f;
  f.mem_available = 24 * GiB;
  f.cgroup_limit = 16 * GiB;
  f.cgroup_current = 4 * GiB;
  HostMemoryBudget b = host_memory_budget(f, 2);
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
  const HostMemoryBudget b = host_memory_budget(HostMemoryFacts{}, 1);
  EXPECT_TRUE(std::isinf(b.rank_bytes));
  EXPECT_TRUE(b.source.empty());
}

TEST(HostMemoryBudget, ThisMachinesFactsAreSane) {
  const HostMemoryFacts f = read_host_memory_facts();
  ASSERT_TRUE(f.mem_available.has_value()) << "/proc/meminfo has no MemAvailable";
  EXPECT_GT(*f.mem_available, 0);
  const HostMemoryBudget b = host_memory_budget(f, 1);
  EXPECT_GT(b.rank_bytes, 0);
  EXPECT_LE(b.rank_bytes, *f.mem_available);
}

}  // namespace
}  // namespace megatron::train
