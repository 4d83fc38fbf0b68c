// A Mamba-2 layer vs an attention layer of the same width, forward + backward, at sequence 1k,
// 4k and 16k (batch 1, f32, CPU): tokens per second. The Mamba layer's cost grows linearly with
// the sequence (chunked SSD scan), attention's quadratically. Also the SSD scan alone at the
// shape of bench/ssd_scan_torch.py's defaults (8 heads x 64, state 128, 1 group, chunk 128),
// to compare with PyTorch's chunked scan. Results are recorded in RESULTS.md.
//   OMP_NUM_THREADS=2 mamba_layer_bench --benchmark_min_time=1
#include <cstdint>
#include <string>

#include <benchmark/benchmark.h>

#include "megatron/nn/core_blocks.h"
#include "megatron/nn/init.h"
#include "megatron/nn/layer.h"

namespace {

using namespace megatron;

constexpr std::int64_t kHidden = 256;

nn::TransformerConfig layer_config() {
  nn::TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = kHidden;
  c.num_attention_heads = 4;  // head dim 64, as the Mamba heads
  c.num_query_groups = 4;
  c.kv_channels = 64;
  c.normalization = nn::NormKind::rmsnorm;
  c.add_bias_linear = false;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  c.mamba_state_dim = 128;
  c.mamba_head_dim = 64;  // d_inner 512: 8 heads
  c.mamba_num_groups = 1;
  return c;
}

// One layer of `kind`, forward + backward of a (seq, 1, h) input per iteration.
void layer(benchmark::State& state, const nn::BlockSpec& block) {
  const std::int64_t seq = state.range(0);
  Backend& be = backend_for(Device::cpu());
  ParameterSet params;
  nn::ParamFactory factory{params};
  nn::Layer l;
  l.declare(factory, "layer", layer_config(), nn::LayerSpec{{block}}, 0);
  nn::initialize_parameters(be, params, 1);
  Tensor x = be.empty({seq, 1, kHidden}, DType::f32), dy = be.empty(x.shape(), DType::f32);
  be.fill_uniform(x, -1, 1, 2, 0);
  be.fill_uniform(dy, -1, 1, 3, 0);
  Tensor y = be.empty(x.shape(), DType::f32), dx = be.empty(x.shape(), DType::f32);
  const nn::LayerContext ctx{be, false};
  const nn::LayerInputs inputs;
  for (auto _ : state) {
    nn::Layer::Saved saved;
    l.forward(ctx, x, inputs, y, saved, true);
    l.backward(ctx, dy, inputs, saved, dx);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(seq), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(compute_threads()));
}

void BM_MambaLayer(benchmark::State& state) {
  layer(state, nn::mamba_block());
}
void BM_AttentionLayer(benchmark::State& state) {
  layer(state, nn::self_attention_block());
}

// The scan alone, forward + backward (bench/ssd_scan_torch.py's shape).
void BM_SsdScan(benchmark::State& state) {
  const std::int64_t seq = state.range(0), heads = 8, dim = 64, groups = 1, n = 128;
  Backend& be = backend_for(Device::cpu());
  auto random = [&](const Shape& shape, std::uint64_t seed, float low, float high) {
    Tensor t = be.empty(shape, DType::f32);
    be.fill_uniform(t, low, high, seed, 0);
    return t;
  };
  Backend::SsdScan scan{random({1, seq, heads, dim}, 1, -1, 1),
                        random({1, seq, heads}, 2, -4, 0),
                        random({1, seq, groups, n}, 3, -1, 1),
                        random({1, seq, groups, n}, 4, -1, 1),
                        random({heads}, 5, 0, 2.7f),
                        random({heads}, 6, 0.5f, 1.5f),
                        random({heads}, 7, -4, -2),
                        128};
  const std::int64_t chunks = (seq + 127) / 128;
  Tensor y = be.empty(scan.x.shape(), DType::f32);
  Tensor states = be.empty({1, chunks, heads, dim, n}, DType::f32);
  const Tensor dy = random(scan.x.shape(), 8, -1, 1);
  Backend::SsdScanGrads g{
      be.empty(scan.x.shape(), DType::f32), be.empty(scan.dt.shape(), DType::f32),
      be.empty(scan.B.shape(), DType::f32), be.empty(scan.C.shape(), DType::f32),
      be.empty({heads}, DType::f32),        be.empty({heads}, DType::f32),
      be.empty({heads}, DType::f32)};
  for (auto _ : state) {
    be.ssd_scan_forward(scan, y, states);
    be.ssd_scan_backward(dy, scan, states, g, false);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(seq), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(compute_threads()));
}

}  // namespace

BENCHMARK(BM_MambaLayer)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionLayer)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SsdScan)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
