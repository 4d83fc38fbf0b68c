// main() for gtest binaries run by mpirun: one MpiRuntime for all tests, failures from any rank
// fail every rank, and ranks other than 0 print only their failures.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <optional>

#include "megatron/error.h"
#include "mpi_test_main.h"

namespace megatron::test {
namespace {

MpiRuntime* g_runtime = nullptr;
std::optional<ParallelState> g_state;
ParallelSizes g_sizes;

class ReleaseState : public ::testing::Environment {
 public:
  void TearDown() override { g_state.reset(); }
};
[[maybe_unused]] ::testing::Environment* const g_release =
    ::testing::AddGlobalTestEnvironment(new ReleaseState);

// On ranks other than 0 only failures are printed, prefixed by the rank, to keep the log readable.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace

MpiRuntime& mpi_runtime() {
  if (g_runtime == nullptr) std::terminate();  // only main() sets it, before any test runs
  return *g_runtime;
}

ParallelState& world_parallel_state(const ParallelSizes& sizes) {
  if (!g_state) {
    g_state.emplace(ParallelState::create(mpi_runtime(), sizes));
    g_sizes = sizes;
  } else if (sizes.tensor != g_sizes.tensor || sizes.pipeline != g_sizes.pipeline ||
             sizes.context != g_sizes.context || sizes.expert != g_sizes.expert ||
             sizes.expert_tensor != g_sizes.expert_tensor || sizes.order != g_sizes.order) {
    throw Error("world_parallel_state: this test binary's parallel state has other sizes");
  }
  return *g_state;
}

}  // namespace megatron::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int failed_anywhere = 1;
  try {
    megatron::MpiRuntime runtime;  // launched by mpirun, so this initializes MPI
    megatron::test::g_runtime = &runtime;
    if (runtime.world_rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new megatron::test::FailurePrinter(runtime.world_rank()));
    }
    const int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
    if (runtime.launched_by_mpi()) {
      MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    } else {
      failed_anywhere = failed_here;
    }
    if (runtime.world_rank() == 0 && failed_anywhere && !failed_here) {
      std::fprintf(stderr, "tests failed on another rank (see [rank N] lines)\n");
    }
    megatron::test::g_runtime = nullptr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argc > 0 ? argv[0] : "mpi test", e.what());
    return 1;
  }
  return failed_anywhere;
}
