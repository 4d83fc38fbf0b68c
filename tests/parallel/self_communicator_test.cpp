// Single-process path: launcher detection, MpiRuntime without MPI, and the one-member communicator.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "megatron/error.h"
#include "megatron/parallel/communicator.h"
#include "megatron/parallel/mpi_runtime.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron {
namespace {

// Clears every launcher variable for the scope of a test and restores them afterwards, so the
// result does not depend on how the test binary itself was started.
class CleanLauncherEnv {
 public:
  static constexpr std::array<const char*, 7> kVars = {
      "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",    "PMI_RANK",    "PMI_SIZE",
      "MV2_COMM_WORLD_SIZE",  "SLURM_PROCID", "SLURM_NTASKS"};

  CleanLauncherEnv() {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_[v] = old ? std::optional<std::string>(old) : std::nullopt;
      unsetenv(v);
    }
  }
  ~CleanLauncherEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  CleanLauncherEnv(const CleanLauncherEnv&) = delete;
  CleanLauncherEnv& operator=(const CleanLauncherEnv&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(MpiRuntime, DetectsLaunchersFromEnvironment) {
  CleanLauncherEnv env;
  EXPECT_EQ(MpiRuntime::detect_launcher(), "");
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_EQ(MpiRuntime::detect_launcher(), "OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("PMI_RANK", "0", 1);
  EXPECT_EQ(MpiRuntime::detect_launcher(), "PMI_RANK");
  unsetenv("PMI_RANK");
  setenv("PMIX_RANK", "2", 1);
  EXPECT_EQ(MpiRuntime::detect_launcher(), "PMIX_RANK");
  unsetenv("PMIX_RANK");
  // A Slurm allocation with one task is not a multi-rank launch.
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "1", 1);
  EXPECT_EQ(MpiRuntime::detect_launcher(), "");
  setenv("SLURM_NTASKS", "8", 1);
  EXPECT_EQ(MpiRuntime::detect_launcher(), "SLURM_PROCID");
}

TEST(MpiRuntime, WithoutLauncherRunsAsOneRankWithoutMpi) {
  CleanLauncherEnv env;
  MpiRuntime runtime;
  EXPECT_FALSE(runtime.launched_by_mpi());
  EXPECT_EQ(runtime.world_size(), 1);
  EXPECT_EQ(runtime.world_rank(), 0);
  EXPECT_EQ(runtime.launcher_hint(), "");
}

TEST(MpiRuntime, SingleProcessModeIgnoresLauncher) {
  CleanLauncherEnv env;
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  MpiRuntime runtime(MpiRuntime::Mode::single_process);
  EXPECT_FALSE(runtime.launched_by_mpi());
  EXPECT_EQ(runtime.world_size(), 1);
  EXPECT_EQ(runtime.launcher_hint(), "OMPI_COMM_WORLD_SIZE");
}

TEST(SelfCommunicator, CollectivesLeaveDataAsIs) {
  auto comm = make_self_communicator(3);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->global_ranks(), std::vector<int>{3});

  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  comm->all_reduce(f, ReduceOp::sum);
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  std::array<std::int64_t, 2> l = {std::int64_t{1} << 40, -7};
  comm->all_reduce(l, ReduceOp::max);
  EXPECT_EQ(l[0], std::int64_t{1} << 40);
  std::vector<double> d = {0.5, 0.25};
  comm->broadcast(std::span<double>(d), 0);
  EXPECT_EQ(d, (std::vector<double>{0.5, 0.25}));
  EXPECT_EQ(comm->all_reduce_value(std::int32_t{42}, ReduceOp::min), 42);
  EXPECT_EQ(comm->all_reduce_value(2.5), 2.5);
  std::uint16_t half_bits[2] = {0x3c00, 0x4000};
  comm->all_reduce(half_bits, 2, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(half_bits[1], 0x4000);
  comm->barrier();
}

TEST(SelfCommunicator, RejectsBadArguments) {
  auto comm = make_self_communicator();
  float x = 1.0f;
  EXPECT_THROW(comm->broadcast(&x, 1, DType::f32, 1), Error);
  EXPECT_THROW(comm->broadcast(&x, 1, DType::f32, -1), Error);
  EXPECT_THROW(comm->all_reduce(nullptr, 4, DType::f32, ReduceOp::sum), Error);
  // An empty buffer is a no-op, null pointer or not.
  EXPECT_NO_THROW(comm->all_reduce(nullptr, 0, DType::f32, ReduceOp::sum));
  try {
    comm->broadcast(&x, 1, DType::f32, 2);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "broadcast: root 2 is outside the group of size 1 (expected 0..0)");
  }
}

TEST(ParallelStateSingleProcess, AllGroupsAreThisRank) {
  CleanLauncherEnv env;
  MpiRuntime runtime;
  ParallelState state = ParallelState::create(runtime, ParallelSizes{});
  EXPECT_EQ(state.world_size(), 1);
  EXPECT_EQ(state.world_rank(), 0);
  for (std::size_t k = 0; k < kGroupCount; ++k) {
    const auto g = static_cast<Group>(k);
    SCOPED_TRACE(std::string(group_name(g)));
    EXPECT_TRUE(state.in_group(g));
    EXPECT_EQ(state.group_ranks(g), std::vector<int>{0});
    EXPECT_EQ(state.group_rank(g), 0);
    EXPECT_EQ(state.group_size(g), 1);
    Communicator& comm = state.comm(g);
    EXPECT_EQ(comm.size(), 1);
    EXPECT_EQ(comm.global_ranks(), std::vector<int>{0});
    std::vector<std::int32_t> v = {7};
    comm.all_reduce(v, ReduceOp::sum);
    EXPECT_EQ(v[0], 7);
  }
  EXPECT_EQ(state.tp_size(), 1);
  EXPECT_EQ(state.pp_size(), 1);
  EXPECT_EQ(state.dp_size(), 1);
  EXPECT_EQ(state.cp_size(), 1);
  EXPECT_EQ(state.ep_size(), 1);
  EXPECT_TRUE(state.is_pipeline_first_stage());
  EXPECT_TRUE(state.is_pipeline_last_stage());
  EXPECT_EQ(state.sizes().expert_tensor, 1);

  // Moving keeps the communicators (they live on the heap) and the table.
  ParallelState moved = std::move(state);
  EXPECT_EQ(moved.comm(Group::data).size(), 1);
}

TEST(ParallelStateSingleProcess, RefusesLayoutsNeedingMoreRanks) {
  CleanLauncherEnv env;
  MpiRuntime runtime;
  ParallelSizes s;
  s.tensor = 2;
  try {
    (void)ParallelState::create(runtime, s);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "world size 1 is not divisible by tensor(2) x context(1) x pipeline(1) = 2");
  }
}

}  // namespace
}  // namespace megatron
