// A Mixture-of-Experts MLP layer against a dense MLP layer of the same active FLOPs, forward +
// backward, on one rank (f32, CPU): tokens per second. The MoE layer: 8 experts of width 1024,
// top-2 softmax routing with the load-balancing and z losses, dropless; the dense layer: one MLP of
// width 2 x 1024, so every token does the same expert arithmetic. The gap is the MoE layer's own
// work: the router, the host routing, the row gather / weighted scatter-add and the grouped GEMMs'
// uneven groups. Results are recorded in RESULTS.md.
//   OMP_NUM_THREADS=2 moe_layer_bench --benchmark_min_time=1 --benchmark_repetitions=3
#include <cstdint>
#include <string>

#include <benchmark/benchmark.h>

#include "megatron/nn/core_blocks.h"
#include "megatron/nn/init.h"
#include "megatron/nn/layer.h"
#include "megatron/nn/moe/moe_block.h"

namespace {

using namespace megatron;

constexpr std::int64_t kHidden = 512, kExperts = 8, kTopk = 2, kExpertFfn = 1024;

nn::TransformerConfig layer_config(bool moe) {
  nn::TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = kHidden;
  c.ffn_hidden_size = kExpertFfn * kTopk;  // the dense layer's width: the same active FLOPs
  c.normalization = nn::NormKind::rmsnorm;
  c.add_bias_linear = false;
  c.gelu = GeluApproximation::none;
  c.hidden_dropout = 0;
  if (moe) {
    nn::MoeConfig& m = c.moe;
    m.num_experts = m.routing.num_experts = kExperts;
    m.routing.topk = kTopk;
    m.ffn_hidden_size = kExpertFfn;
    m.layer_pattern = {1};
    m.aux_loss_coeff = 1e-2;
    m.z_loss_coeff = 1e-3;
  }
  return c;
}

// One layer, forward + backward of a (tokens, 1, h) input per iteration, in training mode (the
// MoE layer computes its auxiliary losses).
void layer(benchmark::State& state, bool moe) {
  const std::int64_t tokens = state.range(0);
  Backend& be = backend_for(Device::cpu());
  ParameterSet params;
  nn::ParamFactory factory{params};
  nn::Layer l;
  l.declare(factory, "layer", layer_config(moe),
            nn::LayerSpec{{moe ? nn::moe_block() : nn::mlp_block()}}, 0);
  nn::initialize_parameters(be, params, 1);
  for (auto& p : params)
    be.fill(p->grad, 0.0);
  Tensor x = be.empty({tokens, 1, kHidden}, DType::f32), dy = be.empty(x.shape(), DType::f32);
  be.fill_uniform(x, -1, 1, 2, 0);
  be.fill_uniform(dy, -1, 1, 3, 0);
  Tensor y = be.empty(x.shape(), DType::f32), dx = be.empty(x.shape(), DType::f32);
  const nn::LayerContext ctx{be, true};
  const nn::LayerInputs inputs;
  for (auto _ : state) {
    nn::Layer::Saved saved;
    l.forward(ctx, x, inputs, y, saved, true);
    l.backward(ctx, dy, inputs, saved, dx);
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(compute_threads()));
}

void BM_MoeLayer(benchmark::State& state) {
  layer(state, true);
}
void BM_DenseLayer(benchmark::State& state) {
  layer(state, false);
}

}  // namespace

BENCHMARK(BM_DenseLayer)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MoeLayer)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
