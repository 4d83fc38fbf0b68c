// LayerNorm and softmax throughput in GB/s (bytes of the tensors each op reads and writes) at
// transformer shapes, beside STREAM-style copy and triad loops that measure this machine's
// memory bandwidth in the same run. Threads: OMP_NUM_THREADS (or all cores). Example:
//   OMP_NUM_THREADS=2 norm_softmax_bench --benchmark_min_time=0.3
#include <omp.h>

#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "megatron/backend/backend.h"
#include "megatron/tensor/tensor.h"

namespace {

using megatron::DType;
using megatron::Tensor;

megatron::Backend& cpu() {
  return megatron::backend_for(megatron::Device::cpu());
}

Tensor random(const megatron::Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  cpu().fill_uniform(t, -1.0f, 1.0f, seed, 0);
  return t;
}

void report_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- memory bandwidth reference (STREAM conventions: copy moves 2 arrays, triad 3) -------------

constexpr std::int64_t kStreamElements = std::int64_t{1} << 25;  // 128 MiB per f32 array

void BM_StreamCopy(benchmark::State& state) {
  std::vector<float> a(kStreamElements, 1.0f), b(kStreamElements, 0.0f);
  for (auto _ : state) {
    float* dst = b.data();
    const float* src = a.data();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < kStreamElements; ++i)
      dst[i] = src[i];
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * kStreamElements * sizeof(float));
}

void BM_StreamTriad(benchmark::State& state) {
  std::vector<float> a(kStreamElements, 0.0f), b(kStreamElements, 1.0f), c(kStreamElements, 2.0f);
  for (auto _ : state) {
    float* dst = a.data();
    const float* x = b.data();
    const float* y = c.data();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < kStreamElements; ++i)
      dst[i] = x[i] + 3.0f * y[i];
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 3.0 * kStreamElements * sizeof(float));
}

// ---- LayerNorm over (rows, hidden), f32 -----------------------------------------------------

struct LayerNormData {
  std::int64_t rows, n;
  Tensor x, weight, bias, y, mean, rstd, dy, dx, dweight, dbias;
  LayerNormData(std::int64_t rows_, std::int64_t n_)
      : rows(rows_),
        n(n_),
        x(random({rows_, n_}, 1)),
        weight(random({n_}, 2)),
        bias(random({n_}, 3)),
        y(Tensor::empty({rows_, n_}, DType::f32)),
        mean(Tensor::empty({rows_}, DType::f32)),
        rstd(Tensor::empty({rows_}, DType::f32)),
        dy(random({rows_, n_}, 4)),
        dx(Tensor::empty({rows_, n_}, DType::f32)),
        dweight(Tensor::empty({n_}, DType::f32)),
        dbias(Tensor::empty({n_}, DType::f32)) {}
  void forward() { cpu().layernorm_forward(x, weight, &bias, 1e-5f, y, mean, rstd); }
  void backward() {
    cpu().layernorm_backward(dy, x, weight, mean, rstd, dx, dweight, &dbias, false);
  }
  double activation_bytes() const { return static_cast<double>(rows * n) * sizeof(float); }
  // Per-row statistics and parameter vectors, small beside the activations but counted.
  double forward_bytes() const { return 2 * activation_bytes() + (2.0 * rows + 2.0 * n) * 4; }
  double backward_bytes() const { return 3 * activation_bytes() + (2.0 * rows + 3.0 * n) * 4; }
};

void BM_LayerNormForward(benchmark::State& state) {
  LayerNormData d(state.range(0), state.range(1));
  for (auto _ : state)
    d.forward();
  report_bytes(state, d.forward_bytes());
}

void BM_LayerNormBackward(benchmark::State& state) {
  LayerNormData d(state.range(0), state.range(1));
  d.forward();
  for (auto _ : state)
    d.backward();
  report_bytes(state, d.backward_bytes());
}

void BM_LayerNormForwardBackward(benchmark::State& state) {
  LayerNormData d(state.range(0), state.range(1));
  for (auto _ : state) {
    d.forward();
    d.backward();
  }
  report_bytes(state, d.forward_bytes() + d.backward_bytes());
}

// ---- softmax over (batch, heads, Sq, Sk), f32 ----------------------------------------------
// Bytes counted as whole tensors: forward reads x and writes y, backward reads dy and y and
// writes dx. (With the causal mask the forward reads only the visible half of x.)

struct SoftmaxData {
  Tensor x, y, dy, dx;
  explicit SoftmaxData(const megatron::Shape& shape)
      : x(random(shape, 5)),
        y(Tensor::empty(shape, DType::f32)),
        dy(random(shape, 6)),
        dx(Tensor::empty(shape, DType::f32)) {}
  double tensor_bytes() const { return static_cast<double>(x.nbytes()); }
};

megatron::Shape softmax_shape(const benchmark::State& state) {
  return {1, state.range(0), state.range(1), state.range(1)};
}

void BM_SoftmaxForward(benchmark::State& state) {
  SoftmaxData d(softmax_shape(state));
  const bool causal = state.range(2) != 0;
  for (auto _ : state)
    cpu().softmax_forward(d.x, nullptr, 0.125f, causal, d.y);
  report_bytes(state, 2 * d.tensor_bytes());
}

void BM_SoftmaxBackward(benchmark::State& state) {
  SoftmaxData d(softmax_shape(state));
  cpu().softmax_forward(d.x, nullptr, 0.125f, state.range(2) != 0, d.y);
  for (auto _ : state)
    cpu().softmax_backward(d.dy, d.y, 0.125f, d.dx);
  report_bytes(state, 3 * d.tensor_bytes());
}

void BM_SoftmaxForwardBackward(benchmark::State& state) {
  SoftmaxData d(softmax_shape(state));
  const bool causal = state.range(2) != 0;
  for (auto _ : state) {
    cpu().softmax_forward(d.x, nullptr, 0.125f, causal, d.y);
    cpu().softmax_backward(d.dy, d.y, 0.125f, d.dx);
  }
  report_bytes(state, 5 * d.tensor_bytes());
}

void layernorm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "hidden"})
      ->Args({4096, 768})
      ->Args({4096, 4096})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}
void softmax_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"heads", "seq", "causal"})
      ->Args({12, 1024, 1})
      ->Args({12, 1024, 0})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

BENCHMARK(BM_StreamCopy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StreamTriad)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LayerNormForward)->Apply(layernorm_shapes);
BENCHMARK(BM_LayerNormBackward)->Apply(layernorm_shapes);
BENCHMARK(BM_LayerNormForwardBackward)->Apply(layernorm_shapes);
BENCHMARK(BM_SoftmaxForward)->Apply(softmax_shapes);
BENCHMARK(BM_SoftmaxBackward)->Apply(softmax_shapes);
BENCHMARK(BM_SoftmaxForwardBackward)->Apply(softmax_shapes);

}  // namespace

BENCHMARK_MAIN();
