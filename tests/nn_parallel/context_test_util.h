// What the context-parallel tests share: the world as one context-parallel group, fp64 random
// tensors, the rows of a tensor at a rank's positions, and an fp64 comparison of rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/nn/context_parallelism.h"
#include "megatron/parallel/parallel_state.h"
#include "parallel/mpi_test_main.h"

namespace megatron::nn::context_test {

// Every rank of the world in one context-parallel group.
inline ContextParallelism context_group() {
  ParallelSizes sizes;
  sizes.context = test::mpi_runtime().world_size();
  ParallelState& state = test::world_parallel_state(sizes);
  return {&state.device_comm(Group::context), state.cp_rank(), state.cp_size()};
}

// Standard normal f64 values, the same on every rank for a seed.
inline Tensor random(const Shape& shape, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor t = Tensor::empty(shape, DType::f64);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = normal(gen);
  return t;
}

// The rows of `t` at `positions` along `dim`.
inline Tensor rows(const Tensor& t, const std::vector<std::int64_t>& positions, int dim) {
  Shape shape = t.shape();
  shape[static_cast<std::size_t>(dim)] = static_cast<std::int64_t>(positions.size());
  Tensor out = Tensor::empty(shape, t.dtype());
  Backend& be = backend_for(Device::cpu());
  for (std::size_t i = 0; i < positions.size(); ++i) {
    Tensor dst = out.slice(dim, static_cast<std::int64_t>(i), 1);
    be.copy(t.slice(dim, positions[i], 1), dst);
  }
  return out;
}

// Within 1e-12 of the largest |want|; infinities (an empty row's log-sum-exp) exactly.
inline void expect_equal_rows(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.contiguous().to_vector<double>();
  const std::vector<double> w = want.contiguous().to_vector<double>();
  double worst = 0, scale = 1e-300;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (std::isinf(w[i])) {
      EXPECT_EQ(g[i], w[i]) << what << " element " << i;
      continue;
    }
    scale = std::max(scale, std::abs(w[i]));
    worst = std::max(worst, std::abs(g[i] - w[i]));
  }
  EXPECT_LE(worst, 1e-12 * scale) << what << ": max |difference| " << worst;
}

}  // namespace megatron::nn::context_test
