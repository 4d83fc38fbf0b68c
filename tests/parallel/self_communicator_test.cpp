// Single-process path: launcher detection, MpiRuntime without MPI, and the one-member communicator.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "megatron/backend/cuda_status.h"
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

TEST(ParallelStateDevice, OneProcessKeepsTheConfiguredDeviceAndHostCommunicators) {
  CleanLauncherEnv env;
  MpiRuntime runtime;
  EXPECT_EQ(runtime.local_rank(), 0);
  ParallelState state = ParallelState::create(runtime, ParallelSizes{}, "cpu");
  EXPECT_EQ(state.device(), Device::cpu());
  EXPECT_EQ(&state.device_comm(Group::data), &state.comm(Group::data));
  EXPECT_EQ(state.comm(Group::tensor).name(), "tensor");
  EXPECT_THROW((void)ParallelState::create(runtime, ParallelSizes{}, "gpu0"), Error);
}

TEST(ParallelStateDevice, CudaWithoutUsableDeviceIsRefusedWithTheReason) {
  const CudaStatus cuda = cuda_status();
  if (cuda.device_count > 0) GTEST_SKIP() << "a CUDA device is usable here: " << cuda.message;
  CleanLauncherEnv env;
  MpiRuntime runtime;
  try {
    (void)ParallelState::create(runtime, ParallelSizes{}, "cuda:1");
    FAIL() << "accepted cuda:1 without a GPU";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(
        msg.rfind("[runtime] device = \"cuda:1\" on world rank 0: no usable CUDA device (", 0), 0u)
        << msg;
  }
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
    EXPECT_STREQ(e.what(),
                 "broadcast on the self group: root 2 is outside the group of size 1 (expected "
                 "0..0)");
  }
}

using testing::expect_error_message;

TEST(SelfCommunicator, ReduceScatterAndAllGatherCopyTheOneBlock) {
  auto comm = make_self_communicator(5, "tensor");
  EXPECT_EQ(comm->name(), "tensor");
  const std::vector<float> send = {1.5f, -2.0f, 3.25f};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    std::vector<float> recv(3, 0.0f);
    comm->reduce_scatter(send.data(), recv.data(), 3, DType::f32, op);
    EXPECT_EQ(recv, send) << reduce_op_name(op);
  }
  std::vector<std::int64_t> gathered(2, 0);
  const std::vector<std::int64_t> mine = {std::int64_t{1} << 40, -9};
  comm->all_gather(mine.data(), gathered.data(), 2, DType::i64);
  EXPECT_EQ(gathered, mine);
  // 16-bit floats are copied bit for bit.
  const std::uint16_t bits[2] = {0x3f80, 0xc000};
  std::uint16_t out[2] = {};
  comm->reduce_scatter(bits, out, 2, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0xc000);
}

TEST(SelfCommunicator, AllToAllCopiesTheOneBlockAndChecksItsCounts) {
  auto comm = make_self_communicator(0, "expert");
  const std::vector<double> send = {0.5, -1.0, 7.0};
  std::vector<double> recv(3, 0.0);
  comm->all_to_all(send.data(), recv.data(), 3, DType::f64);
  EXPECT_EQ(recv, send);
  comm->all_to_all_v(nullptr, {0}, nullptr, {0}, DType::f64);  // nothing to route: no error
  try {
    comm->all_to_all_v(send.data(), {3}, recv.data(), {2}, DType::f64);
    ADD_FAILURE() << "mismatched counts were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "all_to_all on the expert group: this rank sends itself 3 elements but expects 2");
  }
}

TEST(SelfCommunicator, InPlaceFormsKeepTheData) {
  auto comm = make_self_communicator();
  std::vector<double> buf = {0.5, 0.25, -1.0};
  comm->all_gather(buf.data(), buf.data(), 3, DType::f64);
  EXPECT_EQ(buf, (std::vector<double>{0.5, 0.25, -1.0}));
  comm->reduce_scatter(buf.data(), buf.data(), 3, DType::f64, ReduceOp::sum);
  EXPECT_EQ(buf, (std::vector<double>{0.5, 0.25, -1.0}));
  // Any other overlap is refused: recv one element past send.
  std::vector<float> f(4, 1.0f);
  expect_error_message(
      [&] { comm->all_gather(f.data(), f.data() + 1, 3, DType::f32); },
      "all_gather on the self group: the send and recv buffers overlap; the rank's block "
      "may only alias the full buffer at block rank() (0)");
  expect_error_message(
      [&] { comm->reduce_scatter(f.data() + 1, f.data(), 3, DType::f32, ReduceOp::sum); },
      "reduce_scatter on the self group: the send and recv buffers overlap; the rank's block may "
      "only alias the full buffer at block rank() (0)");
}

TEST(SelfCommunicator, AsyncOperationsAreCompleteOnReturn) {
  auto comm = make_self_communicator();
  const std::vector<std::int32_t> send = {4, 5};
  std::vector<std::int32_t> recv(2, 0);
  CommHandle gather = comm->all_gather_async(send.data(), recv.data(), 2, DType::i32);
  EXPECT_TRUE(gather.completed());
  EXPECT_EQ(recv, send);
  CommHandle scatter =
      comm->reduce_scatter_async(send.data(), recv.data(), 2, DType::i32, ReduceOp::max);
  EXPECT_TRUE(scatter.test());
  std::vector<float> x = {2.0f};
  CommHandle reduce = comm->all_reduce_async(x.data(), 1, DType::f32, ReduceOp::sum);
  reduce.wait();
  EXPECT_EQ(x[0], 2.0f);
  // Count 0 does nothing, even with null buffers.
  EXPECT_TRUE(comm->all_gather_async(nullptr, nullptr, 0, DType::f32).completed());
  EXPECT_NO_THROW(comm->reduce_scatter(nullptr, nullptr, 0, DType::f32, ReduceOp::sum));
}

TEST(SelfCommunicator, SendAndRecvHaveNoPeer) {
  auto comm = make_self_communicator(0, "pipeline");
  float x = 1.0f;
  expect_error_message(
      [&] { comm->send(&x, 1, DType::f32, 0); },
      "send on the pipeline group: peer 0 is this rank itself (a group of one has no "
      "other member)");
  expect_error_message(
      [&] { comm->recv(&x, 1, DType::f32, 0, 3); },
      "recv on the pipeline group: peer 0 is this rank itself (a group of one has no "
      "other member)");
  expect_error_message(
      [&] { (void)comm->send_async(&x, 1, DType::f32, 1); },
      "send on the pipeline group: peer 1 is outside the group of size 1 (expected 0..0)");
  expect_error_message(
      [&] { (void)comm->recv_async(&x, 1, DType::f32, -1); },
      "recv on the pipeline group: peer -1 is outside the group of size 1 (expected "
      "0..0)");
}

TEST(SelfCommunicator, RejectsBadArgumentsOfNewOperations) {
  auto comm = make_self_communicator();
  float x = 0.0f;
  expect_error_message([&] { comm->reduce_scatter(nullptr, &x, 1, DType::f32, ReduceOp::sum); },
                       "reduce_scatter on the self group: the send buffer is null but count is 1");
  expect_error_message([&] { comm->all_gather(&x, nullptr, 1, DType::f32); },
                       "all_gather on the self group: the recv buffer is null but count is 1");
  expect_error_message([&] { (void)comm->all_reduce_async(nullptr, 2, DType::f32, ReduceOp::max); },
                       "all_reduce_async on the self group: the buffer is null but count is 2");
  expect_error_message(
      [&] { comm->reduce_scatter(&x, &x, 1, DType::f32, static_cast<ReduceOp>(7)); },
      "reduce_scatter on the self group: unknown reduce op value 7");
  expect_error_message([&] { comm->all_gather(&x, &x, 1, static_cast<DType>(42)); },
                       "all_gather on the self group: unknown dtype value 42");
}

// A request that counts how it is driven, to pin down CommHandle's own rules.
struct CountingRequest final : CommRequest {
  explicit CountingRequest(int* waits, int ready_after = 0, bool fail = false)
      : waits_(waits), ready_after_(ready_after), fail_(fail) {}
  void wait() override {
    ++*waits_;
    if (fail_) throw Error("transport failed");
  }
  bool test() override { return ++tests_ > ready_after_; }
  int* waits_;
  int ready_after_;
  bool fail_;
  int tests_ = 0;
};

TEST(CommHandle, DestructorWaitsWhenWaitWasNeverCalled) {
  int waits = 0;
  { CommHandle h(std::make_unique<CountingRequest>(&waits)); }
  EXPECT_EQ(waits, 1);
  {
    CommHandle h(std::make_unique<CountingRequest>(&waits));
    h.wait();
    h.wait();  // the second call returns at once
  }
  EXPECT_EQ(waits, 2);
  // A failed wait is reported to the caller once; the destructor does not wait again.
  {
    CommHandle h(std::make_unique<CountingRequest>(&waits, 0, /*fail=*/true));
    EXPECT_THROW(h.wait(), Error);
    EXPECT_TRUE(h.completed());
  }
  EXPECT_EQ(waits, 3);
  // The destructor swallows (and logs) a failure instead of terminating.
  { CommHandle h(std::make_unique<CountingRequest>(&waits, 0, /*fail=*/true)); }
  EXPECT_EQ(waits, 4);
}

TEST(CommHandle, TestPollsUntilCompleteAndMovesTransferOwnership) {
  int waits = 0;
  CommHandle h(std::make_unique<CountingRequest>(&waits, /*ready_after=*/2));
  EXPECT_FALSE(h.test());
  EXPECT_FALSE(h.test());
  EXPECT_FALSE(h.completed());
  EXPECT_TRUE(h.test());
  EXPECT_TRUE(h.completed());
  EXPECT_TRUE(h.test());
  EXPECT_EQ(waits, 0);  // completion seen by test() needs no wait

  CommHandle a(std::make_unique<CountingRequest>(&waits));
  CommHandle b = std::move(a);
  EXPECT_TRUE(a.completed());  // NOLINT(bugprone-use-after-move): moved-from is complete
  // Assigning over a pending handle waits for its operation first.
  b = CommHandle(std::make_unique<CountingRequest>(&waits));
  EXPECT_EQ(waits, 1);
  b.wait();
  EXPECT_EQ(waits, 2);
  CommHandle none;
  EXPECT_TRUE(none.completed());
  EXPECT_TRUE(none.test());
  none.wait();
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
