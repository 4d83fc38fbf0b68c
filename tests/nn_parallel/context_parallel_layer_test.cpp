// A whole transformer layer under context parallelism against the unsplit layer in fp64: every
// rank runs its two chunks of the sequence (LayerContext::context, self-attention round the ring)
// with rope rows at their global positions; its output and input gradient are the unsplit layer's
// rows, and the weights' gradients summed over the group are the unsplit ones. Runs on 2 and 3
// ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "megatron/nn/core_blocks.h"
#include "megatron/nn/init.h"
#include "megatron/nn/layer.h"
#include "megatron/nn/ring_attention.h"
#include "megatron/parallel/parallel_state.h"
#include "parallel/mpi_test_main.h"

namespace megatron::nn {
namespace {

constexpr std::int64_t kBatch = 2, kChunk = 2, kHidden = 16;

ContextParallelism context_group() {
  ParallelSizes sizes;
  sizes.context = test::mpi_runtime().world_size();
  ParallelState& state = test::world_parallel_state(sizes);
  return {&state.device_comm(Group::context), state.cp_rank(), state.cp_size()};
}

Backend& cpu() {
  return backend_for(Device::cpu());
}

Tensor random(const Shape& shape, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor t = Tensor::empty(shape, DType::f64);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = normal(gen);
  return t;
}

// The rows of `t` at `positions` along dim 0.
Tensor rows(const Tensor& t, const std::vector<std::int64_t>& positions) {
  Shape shape = t.shape();
  shape[0] = static_cast<std::int64_t>(positions.size());
  Tensor out = Tensor::empty(shape, t.dtype());
  for (std::size_t i = 0; i < positions.size(); ++i) {
    Tensor dst = out.slice(0, static_cast<std::int64_t>(i), 1);
    cpu().copy(t.slice(0, positions[i], 1), dst);
  }
  return out;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.contiguous().to_vector<double>();
  const std::vector<double> w = want.contiguous().to_vector<double>();
  double worst = 0, scale = 1e-300;
  for (std::size_t i = 0; i < w.size(); ++i) {
    scale = std::max(scale, std::abs(w[i]));
    worst = std::max(worst, std::abs(g[i] - w[i]));
  }
  EXPECT_LE(worst, 1e-12 * scale) << what << ": max |difference| " << worst;
}

TransformerConfig layer_config() {
  TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = kHidden;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.kv_channels = 4;
  c.ffn_hidden_size = 24;
  c.rotary_dim = 4;
  c.swiglu = true;
  c.normalization = NormKind::rmsnorm;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  c.init_method_std = 0.3f;
  return c;
}

// One layer's parameters, the same on every rank and on both sides.
struct LayerWithParams {
  ParameterSet params;
  Layer layer;
  LayerWithParams() {
    ParamFactory factory{params, Device::cpu(), DType::f64};
    layer.declare(factory, "layer", layer_config(), transformer_layer_spec(), 1);
    initialize_parameters(cpu(), params, 17);
    zero_gradients(cpu(), params);
  }
};

TEST(ContextParallelLayer, EqualsTheUnsplitLayer) {
  const ContextParallelism cp = context_group();
  const std::int64_t seq = 2 * cp.size * kChunk;
  const std::vector<std::int64_t> positions = context_positions(cp, seq);
  const RotaryTables tables = make_rotary_tables(seq, 4, 10000, DType::f64);
  const Tensor x = random({seq, kBatch, kHidden}, 1), dy = random({seq, kBatch, kHidden}, 2);

  LayerWithParams whole;
  LayerInputs whole_inputs;
  whole_inputs.set_rotary(&tables);
  Tensor y = Tensor::empty(x.shape(), DType::f64), dx = Tensor::empty(x.shape(), DType::f64);
  Layer::Saved saved;
  const LayerContext unsplit{cpu()};
  whole.layer.forward(unsplit, x, whole_inputs, y, saved, true);
  whole.layer.backward(unsplit, dy, whole_inputs, saved, dx);

  LayerWithParams split;
  const RotaryTables local_tables{rows(tables.cos, positions), rows(tables.sin, positions)};
  LayerInputs inputs;
  inputs.set_rotary(&local_tables);
  const Tensor xs = rows(x, positions), dys = rows(dy, positions);
  Tensor ys = Tensor::empty(xs.shape(), DType::f64), dxs = Tensor::empty(xs.shape(), DType::f64);
  Layer::Saved ssaved;
  LayerContext ctx{cpu()};
  ctx.context = cp;
  split.layer.forward(ctx, xs, inputs, ys, ssaved, true);
  split.layer.backward(ctx, dys, inputs, ssaved, dxs);

  expect_close(ys, rows(y, positions), "the layer's output rows");
  expect_close(dxs, rows(dx, positions), "the input gradient's rows");
  for (std::size_t i = 0; i < whole.params.size(); ++i) {
    Tensor grad = split.params[i].grad.contiguous();
    cp.comm->all_reduce(grad.raw_data(), static_cast<std::size_t>(grad.numel()), DType::f64,
                        ReduceOp::sum);
    expect_close(grad, whole.params[i].grad, whole.params[i].name + " gradient, summed over CP");
  }
}

}  // namespace
}  // namespace megatron::nn
