// Shared helpers of the tensor-parallel tests, and their main(): gtest on every MPI rank, the
// failure of any rank failing the run.
#include "tp_test_util.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <vector>

#include "megatron/parallel/mpi_runtime.h"

namespace megatron::tp_test {

namespace {
MpiRuntime* g_runtime = nullptr;
std::optional<ParallelState> g_state;
}  // namespace

ParallelState& state() {
  if (!g_state) {
    ParallelSizes sizes;
    sizes.tensor = g_runtime->world_size();
    g_state.emplace(ParallelState::create(*g_runtime, sizes));
  }
  return *g_state;
}

nn::TensorParallelism tensor_group(bool sequence_parallel) {
  ParallelState& s = state();
  return {&s.comm(Group::tensor), s.tp_rank(), s.tp_size(), sequence_parallel};
}

Tensor shard_of(const Parameter& p, const Tensor& global) {
  Tensor out = Tensor::empty(shard_shape(p), global.dtype());
  if (p.partition_dim < 0 || p.partition_count == 1) {
    Backend& be = backend_for(Device::cpu());
    be.copy(global, out);
    return out;
  }
  Backend& be = backend_for(Device::cpu());
  for (const ShardRun& run : shard_runs(p)) {
    Tensor dst = out.slice(p.partition_dim, run.local_offset, run.length);
    be.copy(global.slice(p.partition_dim, run.global_offset, run.length), dst);
  }
  return out;
}

Tensor sequence_shard(const Tensor& t, const nn::TensorParallelism& tp) {
  const std::int64_t n = t.size(0) / tp.size;
  return t.slice(0, tp.rank * n, n).contiguous();
}

void reduce_sequence_parallel_grads(ParameterSet& params, const nn::TensorParallelism& tp) {
  for (auto& p : params)
    if (p->sequence_parallel) nn::tp_all_reduce(tp, p->grad);
}

Tensor random_tensor(const Shape& shape, unsigned seed, double std) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, std);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v)
    x = static_cast<float>(normal(rng));
  return Tensor::from(v, shape);
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what,
                  double floor) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = floor, err = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    scale = std::max(scale, std::abs(w[i]));
    const double e = std::abs(g[i] - w[i]);
    if (e > err) err = e, worst = i;
  }
  EXPECT_LE(err, tol * scale) << what << ": max |diff| " << err << " at " << worst << " (got "
                              << (g.empty() ? 0 : g[worst]) << ", want "
                              << (w.empty() ? 0 : w[worst]) << "), scale " << scale;
}

namespace {

// On ranks other than 0 only failures are printed, prefixed by the rank.
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
}  // namespace megatron::tp_test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int failed_anywhere = 1;
  try {
    megatron::MpiRuntime runtime;
    megatron::tp_test::g_runtime = &runtime;
    if (runtime.world_rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new megatron::tp_test::FailurePrinter(runtime.world_rank()));
    }
    const int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
    if (runtime.launched_by_mpi()) {
      MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    } else {
      failed_anywhere = failed_here;
    }
    if (runtime.world_rank() == 0 && failed_anywhere && !failed_here)
      std::fprintf(stderr, "tests failed on another rank (see [rank N] lines)\n");
    megatron::tp_test::g_state.reset();
    megatron::tp_test::g_runtime = nullptr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensor-parallel test: %s\n", e.what());
    return 1;
  }
  return failed_anywhere;
}
