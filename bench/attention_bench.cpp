// Fused attention speed and memory: CpuBackend::attention_forward/backward at B=1, S=1024, H=12,
// D=64, causal, f32 (ms and GFLOP/s), and peak extra resident memory of forward+backward for
// growing S (linear for a tiled kernel; a materialised S x S matrix would grow quadratically).
// Compare with bench/attention_torch.py (PyTorch math attention) run in the same session. Also
// bidirectional attention (BERT-like, B=4, S=512) without and with a key padding mask whose samples
// keep 512, 384, 256 and 128 keys: padding tiles are skipped, so the rate stays about the same.
//
// FLOP convention: only visible (query, key) pairs count (causal: S (S + 1) / 2 per head), at
// 4 D FLOPs per pair forward (QK^T and PV) and 8 D backward (dV, dP, dQ, dK). The kernel's
// recomputation of QK^T in backward (and its second pass when dq is not fused) is not credited,
// so the rate is "useful" work, the same count used for PyTorch.
// Threads: OMP_NUM_THREADS (or all cores). Example:
//   OMP_NUM_THREADS=2 attention_bench --benchmark_min_time=2
#include <malloc.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cpu/attention_kernels.h"
#include "megatron/backend/backend.h"
#include "megatron/tensor/tensor.h"

namespace {

using megatron::DType;
using megatron::Tensor;

struct Shape {
  std::int64_t batch, seq, heads, dim;
};

double visible_pairs(const Shape& s) {
  return static_cast<double>(s.batch * s.heads) * static_cast<double>(s.seq) *
         static_cast<double>(s.seq + 1) / 2.0;
}

// Megatron's layout: (S, B, H, D) buffers passed as (B, S, H, D) views.
Tensor sbhd_view(const Shape& s) {
  return Tensor::empty({s.seq, s.batch, s.heads, s.dim}, DType::f32).permute({1, 0, 2, 3});
}

struct Problem {
  explicit Problem(const Shape& shape, bool causal = true)
      : s(shape),
        q(sbhd_view(s)),
        k(sbhd_view(s)),
        v(sbhd_view(s)),
        dout(sbhd_view(s)),
        out(sbhd_view(s)),
        dq(sbhd_view(s)),
        dk(sbhd_view(s)),
        dv(sbhd_view(s)),
        lse(Tensor::empty({s.batch, s.heads, s.seq}, DType::f32)) {
    backend().fill_uniform(q, -1, 1, 1, 0);
    backend().fill_uniform(k, -1, 1, 2, 0);
    backend().fill_uniform(v, -1, 1, 3, 0);
    backend().fill_uniform(dout, -1, 1, 4, 0);
    for (Tensor* t : {&out, &dq, &dk, &dv, &lse})
      backend().fill(*t, 0);
    params.scale = 0.125f;  // 1 / sqrt(64)
    params.causal = causal;
  }
  // Sample b keeps its first lengths[b] keys; the rest are padding.
  void pad_right(const std::vector<std::int64_t>& lengths) {
    std::vector<std::uint8_t> flags(static_cast<std::size_t>(s.batch * s.seq));
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t j = 0; j < s.seq; ++j)
        flags[static_cast<std::size_t>(b * s.seq + j)] = j >= lengths[b] ? 1 : 0;
    }
    params.key_padding_mask = Tensor::from(flags, {s.batch, s.seq});
  }
  static megatron::Backend& backend() { return megatron::backend_for(megatron::Device::cpu()); }
  void forward() { backend().attention_forward(q, k, v, params, out, lse); }
  void backward() { backend().attention_backward(dout, q, k, v, out, lse, params, dq, dk, dv); }

  Shape s;
  Tensor q, k, v, dout, out, dq, dk, dv, lse;
  megatron::AttentionParams params;
};

const Shape kGpt2Small{1, 1024, 12, 64};
const Shape kBertBatch{4, 512, 12, 64};
const std::vector<std::int64_t> kBertLengths{512, 384, 256, 128};

void label(benchmark::State& state) {
  state.SetLabel(std::string("isa=") + megatron::cpu::attention::kernels_f32().isa +
                 " threads=" + std::to_string(megatron::compute_threads()));
}

void rate(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionForward(benchmark::State& state) {
  Problem p(kGpt2Small);
  label(state);
  for (auto _ : state)
    p.forward();
  rate(state, 4.0 * kGpt2Small.dim * visible_pairs(kGpt2Small));
}

void BM_AttentionBackward(benchmark::State& state) {
  Problem p(kGpt2Small);
  p.forward();
  label(state);
  for (auto _ : state)
    p.backward();
  rate(state, 8.0 * kGpt2Small.dim * visible_pairs(kGpt2Small));
}

void BM_AttentionForwardBackward(benchmark::State& state) {
  Problem p(kGpt2Small);
  label(state);
  for (auto _ : state) {
    p.forward();
    p.backward();
  }
  rate(state, 12.0 * kGpt2Small.dim * visible_pairs(kGpt2Small));
}

// Bidirectional forward + backward; `padded`: with kBertLengths as the key padding mask.
void bidirectional(benchmark::State& state, bool padded) {
  Problem p(kBertBatch, false);
  double pairs = static_cast<double>(kBertBatch.batch * kBertBatch.heads * kBertBatch.seq) *
                 static_cast<double>(kBertBatch.seq);
  if (padded) {
    p.pad_right(kBertLengths);
    pairs = 0;
    for (std::int64_t length : kBertLengths)
      pairs += static_cast<double>(kBertBatch.heads * kBertBatch.seq * length);
  }
  label(state);
  for (auto _ : state) {
    p.forward();
    p.backward();
  }
  rate(state, 12.0 * kBertBatch.dim * pairs);
}
void BM_AttentionBidirectionalForwardBackward(benchmark::State& state) {
  bidirectional(state, false);
}
void BM_AttentionPaddedForwardBackward(benchmark::State& state) {
  bidirectional(state, true);
}

// Resident-set figures from /proc/self/status, in bytes (0 where unavailable).
std::int64_t status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

// Returns freed heap memory to the system, then resets the peak resident set (VmHWM) to the
// current one, so memory the op reuses from earlier calls counts again; false where not allowed.
bool reset_peak_rss() {
  malloc_trim(0);
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

// Peak resident memory that forward+backward adds on top of its inputs and outputs (all
// allocated and touched before), against the size of one materialised B x H x S x S f32 matrix.
void BM_AttentionPeakMemory(benchmark::State& state) {
  const Shape s{1, state.range(0), 12, 64};
  Problem p(s);
  p.forward();  // warm: thread pools exist before measuring
  p.backward();
  double extra = 0;
  for (auto _ : state) {
    const bool reset = reset_peak_rss();
    const std::int64_t before = status_bytes("VmRSS");
    p.forward();
    p.backward();
    extra = reset ? static_cast<double>(status_bytes("VmHWM") - before) : -1.0;
  }
  const double mib = 1024.0 * 1024.0;
  state.counters["extra_peak_MiB"] = extra / mib;
  state.counters["tensors_MiB"] = 9.0 * s.batch * s.seq * s.heads * s.dim * 4 / mib;
  state.counters["SxS_matrix_MiB"] =
      static_cast<double>(s.batch * s.heads) * s.seq * s.seq * 4 / mib;
  label(state);
}

BENCHMARK(BM_AttentionForward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionBidirectionalForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionPaddedForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionPeakMemory)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(4096)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
