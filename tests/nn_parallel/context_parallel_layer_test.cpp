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

#include "context_test_util.h"
#include "megatron/nn/core_blocks.h"
#include "megatron/nn/init.h"
#include "megatron/nn/layer.h"
#include "megatron/nn/ring_attention.h"

namespace megatron::nn {
namespace {

constexpr std::int64_t kBatch = 2, kChunk = 2, kHidden = 16;

using context_test::context_group;
using context_test::expect_equal_rows;
using context_test::random;

Backend& cpu() {
  return backend_for(Device::cpu());
}

// The rows of `t` at `positions` along the sequence (dim 0).
Tensor rows(const Tensor& t, const std::vector<std::int64_t>& positions) {
  return context_test::rows(t, positions, 0);
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

  expect_equal_rows(ys, rows(y, positions), "the layer's output rows");
  expect_equal_rows(dxs, rows(dx, positions), "the input gradient's rows");
  for (std::size_t i = 0; i < whole.params.size(); ++i) {
    Tensor grad = split.params[i].grad.contiguous();
    cp.comm->all_reduce(grad.raw_data(), static_cast<std::size_t>(grad.numel()), DType::f64,
                        ReduceOp::sum);
    expect_equal_rows(grad, whole.params[i].grad,
                      whole.params[i].name + " gradient, summed over CP");
  }
}

}  // namespace
}  // namespace megatron::nn
