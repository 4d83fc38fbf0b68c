// Shared helpers of the tensor-parallel tests (main() is tests/parallel/mpi_test_main.cpp).
#include "tp_test_util.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "megatron/parallel/mpi_runtime.h"
#include "parallel/mpi_test_main.h"

namespace megatron::tp_test {

ParallelState& state() {
  ParallelSizes sizes;
  sizes.tensor = test::mpi_runtime().world_size();
  return test::world_parallel_state(sizes);
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

}  // namespace megatron::tp_test
