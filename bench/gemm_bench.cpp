// GEMM throughput (GFLOP/s): CpuBackend::gemm in f32 and bf16 beside the raw library rates it is
// judged against, measured in the same run: plain cblas_sgemm, plain oneDNN f32 and bf16 matmul.
// Threads: OMP_NUM_THREADS (or all cores). Example (the run recorded in RESULTS.md):
//   OMP_NUM_THREADS=2 gemm_bench --benchmark_min_time=0.2 --benchmark_repetitions=3
//     --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// and, load-independent, the same with OMP_NUM_THREADS=1 and --gemm_timing=cpu (flags: see main).
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <dnnl.hpp>

#include "backend/cpu/gemm_policy.h"
#include "megatron/backend/backend.h"
#include "megatron/tensor/tensor.h"

namespace {

using megatron::DType;

struct GemmShape {
  const char* name;
  std::int64_t batch, m, n, k;
  bool trans_a, trans_b;
};

// Square sizes, then one GPT layer at hidden 768 over 2048 tokens with Megatron's (out, in)
// weights: forward y = x @ W^T, dgrad dx = dy @ W, wgrad dW = dy^T @ x; then the batched
// products of unfused attention (12 heads, sequence 1024, head dim 64).
const std::vector<GemmShape> kShapes = {
    {"square_512", 1, 512, 512, 512, false, false},
    {"square_1024", 1, 1024, 1024, 1024, false, false},
    {"square_2048", 1, 2048, 2048, 2048, false, false},
    {"qkv_fwd", 1, 2048, 2304, 768, false, true},
    {"qkv_dgrad", 1, 2048, 768, 2304, false, false},
    {"qkv_wgrad", 1, 2304, 768, 2048, true, false},
    {"proj_fwd", 1, 2048, 768, 768, false, true},
    {"fc1_fwd", 1, 2048, 3072, 768, false, true},
    {"fc1_dgrad", 1, 2048, 768, 3072, false, false},
    {"fc1_wgrad", 1, 3072, 768, 2048, true, false},
    {"fc2_fwd", 1, 2048, 768, 3072, false, true},
    {"fc2_dgrad", 1, 2048, 3072, 768, false, false},
    {"fc2_wgrad", 1, 768, 3072, 2048, true, false},
    {"attn_scores_b12", 12, 1024, 1024, 64, false, true},
    {"attn_context_b12", 12, 1024, 64, 1024, false, false},
};

double flops(const GemmShape& s) {
  return 2.0 * s.batch * s.m * s.n * s.k;
}

megatron::Shape stored(const GemmShape& s, std::int64_t rows, std::int64_t cols, bool trans) {
  megatron::Shape shape = trans ? megatron::Shape{cols, rows} : megatron::Shape{rows, cols};
  if (s.batch > 1) shape.insert(shape.begin(), s.batch);
  return shape;
}

// Shown as "GFLOP=<rate>/s".
void report(benchmark::State& state, const GemmShape& s) {
  state.counters["GFLOP"] =
      benchmark::Counter(flops(s) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void ours(benchmark::State& state, const GemmShape& s, DType dtype) {
  auto& backend = megatron::backend_for(megatron::Device::cpu());
  megatron::Tensor a = megatron::Tensor::empty(stored(s, s.m, s.k, s.trans_a), dtype);
  megatron::Tensor b = megatron::Tensor::empty(stored(s, s.k, s.n, s.trans_b), dtype);
  megatron::Tensor c = megatron::Tensor::empty(stored(s, s.m, s.n, false), DType::f32);
  backend.fill_uniform(a, -1, 1, 1, 0);
  backend.fill_uniform(b, -1, 1, 2, 0);
  state.SetLabel(megatron::cpu::gemm_route(a, s.trans_a, b, s.trans_b, c));
  for (auto _ : state) {
    backend.gemm(a, s.trans_a, b, s.trans_b, c);
    benchmark::DoNotOptimize(c.raw_data());
  }
  report(state, s);
}

void raw_cblas(benchmark::State& state, const GemmShape& s) {
  std::vector<float> a(static_cast<std::size_t>(s.batch * s.m * s.k), 0.5f);
  std::vector<float> b(static_cast<std::size_t>(s.batch * s.k * s.n), 0.25f);
  std::vector<float> c(static_cast<std::size_t>(s.batch * s.m * s.n));
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  const int lda = s.trans_a ? m : k, ldb = s.trans_b ? k : n;
  for (auto _ : state) {
    for (std::int64_t i = 0; i < s.batch; ++i) {
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                  s.trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data() + i * s.m * s.k,
                  lda, b.data() + i * s.k * s.n, ldb, 0.0f, c.data() + i * s.m * s.n, n);
    }
    benchmark::DoNotOptimize(c.data());
  }
  report(state, s);
}

// A plain oneDNN matmul, created once outside the timed loop: the library's best case.
void raw_onednn(benchmark::State& state, const GemmShape& s, dnnl::memory::data_type type) {
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const auto desc = [&](std::int64_t rows, std::int64_t cols, bool trans, memory::data_type t) {
    const memory::dims strides =
        trans ? memory::dims{rows * cols, 1, rows} : memory::dims{rows * cols, cols, 1};
    return memory::desc({s.batch, rows, cols}, t, strides);
  };
  const memory::desc a_desc = desc(s.m, s.k, s.trans_a, type);
  const memory::desc b_desc = desc(s.k, s.n, s.trans_b, type);
  const memory::desc c_desc = desc(s.m, s.n, false, memory::data_type::f32);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), engine);
  const dnnl::matmul matmul(pd);
  memory a(a_desc, engine), b(b_desc, engine), c(c_desc, engine);
  std::fill_n(static_cast<char*>(a.get_data_handle()), a_desc.get_size(), 0x3f);
  std::fill_n(static_cast<char*>(b.get_data_handle()), b_desc.get_size(), 0x3e);
  state.SetLabel(pd.impl_info_str());
  for (auto _ : state) {
    matmul.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
  report(state, s);
}

// Removes `flag` from argv (before Google Benchmark parses it); whether it was there.
bool take_flag(int& argc, char** argv, const std::string& flag) {
  bool found = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (flag == argv[i]) {
      found = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return found;
}

// The grid behind the f32 library rule in core/src/backend/cpu/gemm_policy.h: M x N x K over
// {128, 512, 2048} x {64, 768, 3072} x {64, 768, 3072} in the NN, NT and TN layouts, tiny squares,
// and attention-shaped batches.
std::vector<GemmShape> calibration_shapes() {
  static std::vector<std::string> names;  // GemmShape holds a const char*
  std::vector<GemmShape> shapes;
  const auto add = [&](std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool ta,
                       bool tb) {
    names.push_back((batch > 1 ? "b" + std::to_string(batch) + "_" : std::string()) +
                    std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + "_" +
                    (ta ? "T" : "N") + (tb ? "T" : "N"));
    shapes.push_back({nullptr, batch, m, n, k, ta, tb});
  };
  for (std::int64_t m : {128, 512, 2048}) {
    for (std::int64_t n : {64, 768, 3072}) {
      for (std::int64_t k : {64, 768, 3072}) {
        add(1, m, n, k, false, false);
        add(1, m, n, k, false, true);
        add(1, m, n, k, true, false);
      }
    }
  }
  for (std::int64_t size : {32, 64, 128})
    add(1, size, size, size, false, false);
  add(4, 32, 32, 32, false, false);
  for (std::int64_t seq : {128, 512, 1024}) {
    add(12, seq, seq, 64, false, true);
    add(12, seq, 64, seq, false, false);
  }
  names.shrink_to_fit();
  for (std::size_t i = 0; i < shapes.size(); ++i)
    shapes[i].name = names[i].c_str();
  return shapes;
}

}  // namespace

// Flags of our own, besides Google Benchmark's:
//   --gemm_timing=cpu   rate work per CPU-second of the whole process instead of per wall-clock
//                       second. On a shared, loaded machine that is the load-independent figure
//                       for comparing kernels (use OMP_NUM_THREADS=1, where it is the kernel's own
//                       time; with more threads it would also count threads waiting at barriers).
//   --gemm_calibration  instead of the standard shapes, the grid behind the f32 library rule,
//                       raw cblas_sgemm and oneDNN f32 only (plus our route, to see the choice).
int main(int argc, char** argv) {
  const bool cpu_timing = take_flag(argc, argv, "--gemm_timing=cpu");
  const bool calibration = take_flag(argc, argv, "--gemm_calibration");
  megatron::set_compute_threads(0);  // OMP_NUM_THREADS or all cores, for OpenMP and OpenBLAS
  benchmark::AddCustomContext("compute_threads", std::to_string(megatron::compute_threads()));
  benchmark::AddCustomContext("timing", cpu_timing ? "process CPU time" : "wall clock");
  const std::vector<GemmShape> shapes = calibration ? calibration_shapes() : kShapes;
  for (const GemmShape& s : shapes) {
    const std::string name = std::string(s.name) + "/";
    // On a shared machine the best repetition is the least disturbed one: with
    // --benchmark_repetitions, the "max" row of GFLOP (and "min" of time) is the one to read.
    const auto add = [&](const std::string& impl, auto fn) {
      auto* bench = benchmark::RegisterBenchmark((name + impl).c_str(), fn);
      if (cpu_timing) {
        bench->MeasureProcessCPUTime();
      } else {
        bench->UseRealTime();
      }
      bench->Unit(benchmark::kMillisecond)
          ->ComputeStatistics(
              "max",
              [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); })
          ->ComputeStatistics("min", [](const std::vector<double>& v) {
            return *std::min_element(v.begin(), v.end());
          });
    };
    add("ours_f32", [s](benchmark::State& st) { ours(st, s, DType::f32); });
    if (!calibration) add("ours_bf16", [s](benchmark::State& st) { ours(st, s, DType::bf16); });
    add("cblas_f32", [s](benchmark::State& st) { raw_cblas(st, s); });
    add("onednn_f32",
        [s](benchmark::State& st) { raw_onednn(st, s, dnnl::memory::data_type::f32); });
    if (!calibration) {
      add("onednn_bf16",
          [s](benchmark::State& st) { raw_onednn(st, s, dnnl::memory::data_type::bf16); });
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
