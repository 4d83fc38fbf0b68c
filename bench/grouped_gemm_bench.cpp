// The grouped GEMM of Mixture of Experts against one plain GEMM of the same total work: 8 experts'
// tokens in uneven groups (top-2 routing of 1024 tokens, counts between 96 and 416), hidden 512,
// expert FFN 1024, forward (tokens @ W_g^T) in f32 and bf16. The figure to read is the grouped
// rate as a share of the plain one (target >= 80%, issue 40). Results are recorded in RESULTS.md.
//   OMP_NUM_THREADS=2 grouped_gemm_bench --benchmark_min_time=1
#include <cstdint>
#include <numeric>
#include <vector>

#include <benchmark/benchmark.h>

#include "megatron/backend/backend.h"

namespace {

using namespace megatron;

constexpr std::int64_t kHidden = 512, kFfn = 1024;
// 2048 routed rows (1024 tokens x top-2) over 8 experts, unevenly.
const std::vector<std::int64_t> kGroups = {96, 416, 224, 288, 160, 352, 192, 320};

std::int64_t rows() {
  return std::accumulate(kGroups.begin(), kGroups.end(), std::int64_t{0});
}

void set_counters(benchmark::State& state) {
  const double flops = 2.0 * static_cast<double>(rows()) * kHidden * kFfn;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

Tensor random(Backend& be, const Shape& shape, DType dtype, std::uint64_t seed) {
  Tensor t = be.empty(shape, dtype);
  be.fill_uniform(t, -1, 1, seed, 0);
  return t;
}

void BM_PlainGemm(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  Backend& be = backend_for(Device::cpu());
  const Tensor x = random(be, {rows(), kHidden}, dtype, 1);
  const Tensor w = random(be, {kFfn, kHidden}, dtype, 2);
  Tensor y = be.empty({rows(), kFfn}, DType::f32);
  for (auto _ : state)
    be.gemm(x, false, w, true, y);
  set_counters(state);
}

void BM_GroupedGemm(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  Backend& be = backend_for(Device::cpu());
  const auto experts = static_cast<std::int64_t>(kGroups.size());
  const Tensor x = random(be, {rows(), kHidden}, dtype, 1);
  const Tensor w = random(be, {experts, kFfn, kHidden}, dtype, 2);
  Tensor y = be.empty({rows(), kFfn}, DType::f32);
  for (auto _ : state)
    be.grouped_gemm(x, false, w, true, kGroups, y);
  set_counters(state);
}

}  // namespace

BENCHMARK(BM_PlainGemm)
    ->Arg(static_cast<int>(DType::f32))
    ->Arg(static_cast<int>(DType::bf16))
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GroupedGemm)
    ->Arg(static_cast<int>(DType::f32))
    ->Arg(static_cast<int>(DType::bf16))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
