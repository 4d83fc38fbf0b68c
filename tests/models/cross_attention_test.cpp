// Cross-attention and the T5 decoder layer in fp64: gradients of every parameter, of the decoder
// input and of the (accumulated) encoder output against central differences, with padded encoder
// positions and Sq != Sk; the forward against a plain fp64 computation written here; refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/model_checks.h"
#include "megatron/error.h"
#include "megatron/nn/core_blocks.h"
#include "megatron/nn/cross_attention.h"
#include "megatron/nn/layer.h"
#include "megatron/nn/layer_stack.h"

namespace megatron {
namespace {

constexpr std::int64_t kSq = 5, kSk = 7, kB = 2, kH = 8, kHeads = 2, kHn = 3;

Backend& cpu() {
  return backend_for(Device::cpu());
}

nn::TransformerConfig config() {
  nn::TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = kH;
  c.num_attention_heads = kHeads;
  c.num_query_groups = kHeads;
  c.kv_channels = kHn;  // heads * kv_channels != hidden: catches a projection sized by hidden
  c.ffn_hidden_size = 12;
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.25f;
  c.init_method_std = 0.4f;
  return c;
}

using test::random_tensor;

// Sample 0 sees every encoder position; sample 1's last three are padding.
Tensor memory_padding() {
  std::vector<std::uint8_t> m(static_cast<std::size_t>(kB * kSk), 0);
  for (std::int64_t t = kSk - 3; t < kSk; ++t)
    m[static_cast<std::size_t>(kSk + t)] = 1;
  return Tensor::from(m, {kB, kSk});
}

// Every parameter random (biases and norm weights too), so every path carries a gradient.
void randomize(ParameterSet& params) {
  nn::initialize_parameters(cpu(), params, 11);
  unsigned seed = 100;
  for (auto& p : params)
    cpu().copy(random_tensor(p->value.shape(), seed++, 0.4), p->value);
}

using test::dot;
using test::expect_input_gradient;

// y = x W^T + b over the last dim of an (rows..., in) fp64 host tensor.
std::vector<double> linear(const std::vector<double>& x, std::int64_t rows, std::int64_t in,
                           const Parameter& w, const Parameter& b) {
  const std::vector<double> wv = w.value.to_vector<double>(), bv = b.value.to_vector<double>();
  const std::int64_t out = w.value.size(0);
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = bv[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < in; ++i)
        s += x[static_cast<std::size_t>(r * in + i)] * wv[static_cast<std::size_t>(o * in + i)];
      y[static_cast<std::size_t>(r * out + o)] = s;
    }
  return y;
}

// Megatron-core's CrossAttention written out: q = linear_q(x) per head, linear_kv(memory) per
// head [k | v], softmax(q k^T / sqrt(hn)) over the unpadded keys, then linear_proj.
std::vector<double> reference_cross_attention(const ParameterSet& p, const Tensor& x,
                                              const Tensor& memory, const Tensor& padding) {
  const std::vector<double> q = linear(x.to_vector<double>(), kSq * kB, kH,
                                       *p.find("xa.linear_q.weight"), *p.find("xa.linear_q.bias"));
  const std::vector<double> kv =
      linear(memory.to_vector<double>(), kSk * kB, kH, *p.find("xa.linear_kv.weight"),
             *p.find("xa.linear_kv.bias"));
  const std::vector<std::int32_t> pad = [&] {
    std::vector<std::int32_t> v;
    const std::uint8_t* m = padding.data<std::uint8_t>();
    for (std::int64_t i = 0; i < padding.numel(); ++i)
      v.push_back(m[i]);
    return v;
  }();
  // The backend takes the softmax scale as a float (AttentionParams::scale), also in fp64.
  const double scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kHn)));
  std::vector<double> context(static_cast<std::size_t>(kSq * kB * kHeads * kHn), 0.0);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t n = 0; n < kHeads; ++n)
      for (std::int64_t s = 0; s < kSq; ++s) {
        std::vector<double> score(static_cast<std::size_t>(kSk),
                                  -std::numeric_limits<double>::infinity());
        double top = -std::numeric_limits<double>::infinity();
        for (std::int64_t t = 0; t < kSk; ++t) {
          if (pad[static_cast<std::size_t>(b * kSk + t)]) continue;
          double d = 0;
          for (std::int64_t e = 0; e < kHn; ++e)
            d += q[static_cast<std::size_t>((s * kB + b) * kHeads * kHn + n * kHn + e)] *
                 kv[static_cast<std::size_t>((t * kB + b) * 2 * kHeads * kHn + n * 2 * kHn + e)];
          score[static_cast<std::size_t>(t)] = d * scale;
          top = std::max(top, d * scale);
        }
        double total = 0;
        for (double& sc : score) {
          sc = std::exp(sc - top);
          total += sc;
        }
        for (std::int64_t t = 0; t < kSk; ++t)
          for (std::int64_t e = 0; e < kHn; ++e)
            context[static_cast<std::size_t>((s * kB + b) * kHeads * kHn + n * kHn + e)] +=
                score[static_cast<std::size_t>(t)] / total *
                kv[static_cast<std::size_t>((t * kB + b) * 2 * kHeads * kHn + n * 2 * kHn + kHn +
                                            e)];
      }
  return linear(context, kSq * kB, kHeads * kHn, *p.find("xa.linear_proj.weight"),
                *p.find("xa.linear_proj.bias"));
}

TEST(CrossAttention, ParametersAreMegatronCores) {
  ParameterSet params;
  nn::ParamFactory f{params, Device::cpu(), DType::f64};
  nn::CrossAttention xa;
  xa.declare(f, "xa", config());
  const std::vector<std::pair<std::string, Shape>> want = {
      {"xa.linear_q.weight", {kHeads * kHn, kH}},      {"xa.linear_q.bias", {kHeads * kHn}},
      {"xa.linear_kv.weight", {2 * kHeads * kHn, kH}}, {"xa.linear_kv.bias", {2 * kHeads * kHn}},
      {"xa.linear_proj.weight", {kH, kHeads * kHn}},   {"xa.linear_proj.bias", {kH}},
  };
  ASSERT_EQ(params.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(params[i].name, want[i].first);
    EXPECT_EQ(params[i].global_shape, want[i].second) << want[i].first;
  }
}

TEST(CrossAttention, ForwardMatchesPlainComputation) {
  ParameterSet params;
  nn::ParamFactory f{params, Device::cpu(), DType::f64};
  nn::CrossAttention xa;
  xa.declare(f, "xa", config());
  randomize(params);
  nn::LayerInputs inputs;
  inputs.set(nn::layer_input::memory_padding_mask, memory_padding());
  const Tensor x = random_tensor({kSq, kB, kH}, 1), memory = random_tensor({kSk, kB, kH}, 2);
  Tensor y = Tensor::empty({kSq, kB, kH}, DType::f64);
  nn::CrossAttention::Saved saved;
  xa.forward(nn::LayerContext{cpu(), false}, x, memory, inputs, 0, y, saved);
  const std::vector<double> got = y.to_vector<double>();
  const std::vector<double> want = reference_cross_attention(
      params, x, memory, inputs.get(nn::layer_input::memory_padding_mask));
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;

  // A padded position's memory changes nothing.
  Tensor moved = random_tensor({kSk, kB, kH}, 2);
  moved.data<double>()[((kSk - 1) * kB + 1) * kH] += 5.0;
  Tensor y2 = Tensor::empty({kSq, kB, kH}, DType::f64);
  xa.forward(nn::LayerContext{cpu(), false}, x, moved, inputs, 0, y2, saved);
  EXPECT_EQ(y2.to_vector<double>(), got);
}

// With attention dropout on (a fixed mask): every parameter, dx, and dmemory added to what the
// accumulator held.
TEST(CrossAttention, GradientsMatchFiniteDifferences) {
  ParameterSet params;
  nn::ParamFactory f{params, Device::cpu(), DType::f64};
  nn::CrossAttention xa;
  xa.declare(f, "xa", config());
  randomize(params);
  nn::LayerInputs inputs;
  inputs.set(nn::layer_input::memory_padding_mask, memory_padding());
  const nn::LayerContext ctx{cpu(), true, 7, 1};
  Tensor x = random_tensor({kSq, kB, kH}, 1), memory = random_tensor({kSk, kB, kH}, 2);
  const Tensor w = random_tensor({kSq, kB, kH}, 3);
  const auto objective = [&] {
    Tensor y = Tensor::empty({kSq, kB, kH}, DType::f64);
    nn::CrossAttention::Saved saved;
    xa.forward(ctx, x, memory, inputs, 4, y, saved);
    return dot(y, w);
  };
  Tensor y = Tensor::empty({kSq, kB, kH}, DType::f64), dx = Tensor::empty(x.shape(), DType::f64);
  nn::CrossAttention::Saved saved;
  xa.forward(ctx, x, memory, inputs, 4, y, saved);
  const Tensor before = random_tensor(memory.shape(), 9);
  Tensor dmemory = random_tensor(memory.shape(), 9);
  xa.backward(ctx, x, memory, w, inputs, 4, saved, dx, dmemory);
  std::vector<double> added_values = dmemory.to_vector<double>();
  const std::vector<double> before_values = before.to_vector<double>();
  for (std::size_t i = 0; i < added_values.size(); ++i)
    added_values[i] -= before_values[i];
  const Tensor added = Tensor::from(added_values, memory.shape());

  test::expect_gradients_match_finite_differences(params, objective);
  expect_input_gradient(x, dx, objective, "dx");
  expect_input_gradient(memory, added, objective, "dmemory");
  // The padded positions of sample 1 get no gradient.
  const std::vector<double> a = added.to_vector<double>();
  for (std::int64_t t = kSk - 3; t < kSk; ++t)
    for (std::int64_t e = 0; e < kH; ++e)
      EXPECT_EQ(a[static_cast<std::size_t>((t * kB + 1) * kH + e)], 0.0) << t;
}

TEST(CrossAttention, RefusesGroupedQueryAttention) {
  ParameterSet params;
  nn::ParamFactory f{params, Device::cpu(), DType::f64};
  nn::TransformerConfig c = config();
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  nn::CrossAttention xa;
  try {
    xa.declare(f, "decoder.layers.0.cross_attention", c);
    ADD_FAILURE() << "grouped-query cross-attention accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "num_query_groups (2) must equal num_attention_heads (4) in "
              "decoder.layers.0.cross_attention: grouped-query attention is not supported in "
              "cross-attention");
  }
}

TEST(CrossAttention, RefusesMismatchedMemoryAndMask) {
  ParameterSet params;
  nn::ParamFactory f{params, Device::cpu(), DType::f64};
  nn::CrossAttention xa;
  xa.declare(f, "xa", config());
  randomize(params);
  const nn::LayerContext ctx{cpu(), false};
  const Tensor x = random_tensor({kSq, kB, kH}, 1);
  Tensor y = Tensor::empty({kSq, kB, kH}, DType::f64);
  nn::CrossAttention::Saved saved;
  nn::LayerInputs inputs;
  inputs.set(nn::layer_input::memory_padding_mask, memory_padding());
  const auto message = [&](const Tensor& memory) {
    try {
      xa.forward(ctx, x, memory, inputs, 0, y, saved);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(random_tensor({kSk, kB + 1, kH}, 2)),
            "cross-attention: memory's batch differs from x's (x [5, 2, 8], memory [7, 3, 8], "
            "memory padding mask [2, 7])");
  EXPECT_EQ(message(random_tensor({kSk + 1, kB, kH}, 2)),
            "cross-attention: the memory padding mask must be u8 (batch, memory sequence) (x "
            "[5, 2, 8], memory [8, 2, 8], memory padding mask [2, 7])");
  EXPECT_EQ(message(Tensor()),
            "cross-attention: no encoder output (memory) given (x [5, 2, 8], memory undefined, "
            "memory padding mask [2, 7])");
}

// Megatron's T5 decoder layer (local spec) with hidden and attention dropout on (fixed masks).
TEST(DecoderLayer, GradientsMatchFiniteDifferences) {
  nn::TransformerConfig c = config();
  c.normalization = nn::NormKind::layernorm;
  const nn::LayerSpec spec = nn::decoder_layer_spec(nn::AttentionMask::causal);
  EXPECT_EQ(nn::Layer::dropout_sites(spec), 5u);
  EXPECT_EQ(nn::Layer::dropout_sites(nn::transformer_layer_spec()), 3u);
  ParameterSet params;
  nn::ParamFactory f{params, Device::cpu(), DType::f64};
  nn::Layer layer;
  layer.declare(f, "decoder.layers.0", c, spec, 2);
  std::vector<std::string> names;
  for (auto& p : params)
    names.push_back(p->name);
  const std::string l = "decoder.layers.0.";
  EXPECT_EQ(names, (std::vector<std::string>{
                       l + "input_layernorm.weight",
                       l + "input_layernorm.bias",
                       l + "self_attention.linear_qkv.weight",
                       l + "self_attention.linear_qkv.bias",
                       l + "self_attention.linear_proj.weight",
                       l + "self_attention.linear_proj.bias",
                       l + "pre_cross_attn_layernorm.weight",
                       l + "pre_cross_attn_layernorm.bias",
                       l + "cross_attention.linear_q.weight",
                       l + "cross_attention.linear_q.bias",
                       l + "cross_attention.linear_kv.weight",
                       l + "cross_attention.linear_kv.bias",
                       l + "cross_attention.linear_proj.weight",
                       l + "cross_attention.linear_proj.bias",
                       l + "pre_mlp_layernorm.weight",
                       l + "pre_mlp_layernorm.bias",
                       l + "mlp.linear_fc1.weight",
                       l + "mlp.linear_fc1.bias",
                       l + "mlp.linear_fc2.weight",
                       l + "mlp.linear_fc2.bias",
                   }));
  randomize(params);

  Tensor x = random_tensor({kSq, kB, kH}, 1);
  nn::LayerInputs inputs;
  inputs.set(nn::layer_input::memory, random_tensor({kSk, kB, kH}, 2));
  inputs.set(nn::layer_input::memory_padding_mask, memory_padding());
  const nn::LayerContext ctx{cpu(), true, 7, 1};
  const Tensor w = random_tensor({kSq, kB, kH}, 3);
  const auto objective = [&] {
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    nn::Layer::Saved saved;
    layer.forward(ctx, x, inputs, y, saved, false);
    return dot(y, w);
  };
  Tensor y = Tensor::empty(x.shape(), DType::f64), dx = Tensor::empty(x.shape(), DType::f64);
  nn::Layer::Saved saved;
  layer.forward(ctx, x, inputs, y, saved, true);
  EXPECT_EQ(y.to_vector<double>(), [&] {
    Tensor again = Tensor::empty(x.shape(), DType::f64);
    nn::Layer::Saved unused;
    layer.forward(ctx, x, inputs, again, unused, false);
    return again.to_vector<double>();
  }());

  // Without a memory gradient to accumulate into, backward refuses.
  nn::LayerInputs no_grad = inputs;
  EXPECT_THROW(layer.backward(ctx, w, no_grad, saved, dx), Error);

  Tensor memory = inputs.get(nn::layer_input::memory);
  Tensor dmemory = Tensor::zeros(memory.shape(), DType::f64);
  inputs.collect_gradient(nn::layer_input::memory, dmemory);
  layer.backward(ctx, w, inputs, saved, dx);
  test::expect_gradients_match_finite_differences(params, objective);
  expect_input_gradient(x, dx, objective, "dx");
  expect_input_gradient(memory, dmemory, objective, "dmemory");
}

// T5's decoder self-attention (AttentionMask::causal_padding): a real position's output depends
// on no later position and on no padding position, and the gradients match finite differences.
TEST(DecoderLayer, CausalPaddingSelfAttentionSeesOnlyEarlierRealKeys) {
  nn::TransformerConfig c = config();
  c.normalization = nn::NormKind::layernorm;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  const nn::LayerSpec spec = nn::transformer_layer_spec(nn::AttentionMask::causal_padding);
  ParameterSet params;
  nn::ParamFactory f{params, Device::cpu(), DType::f64};
  nn::Layer layer;
  layer.declare(f, "decoder.layers.0", c, spec, 0);
  randomize(params);

  const std::int64_t s = 6;
  // Sample 0 is all real; sample 1 has padding at positions 4 and 5.
  std::vector<std::uint8_t> pad(static_cast<std::size_t>(kB * s), 0);
  pad[static_cast<std::size_t>(s + 4)] = pad[static_cast<std::size_t>(s + 5)] = 1;
  nn::LayerInputs inputs;
  inputs.set(nn::layer_input::key_padding_mask, Tensor::from(pad, {kB, s}));
  const nn::LayerContext ctx{cpu(), false, 7, 1};
  auto run = [&](const Tensor& x) {
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    nn::Layer::Saved saved;
    layer.forward(ctx, x, inputs, y, saved, false);
    return y.to_vector<double>();
  };
  Tensor x = random_tensor({s, kB, kH}, 4);
  const auto y = run(x);
  // Change position 3 of sample 0 (causality) and the padding positions of sample 1.
  Tensor changed = Tensor::empty(x.shape(), DType::f64);
  cpu().copy(x, changed);
  double* v = changed.data<double>();
  for (std::int64_t e = 0; e < kH; ++e) {
    v[(3 * kB + 0) * kH + e] += 1.0;
    v[(4 * kB + 1) * kH + e] -= 2.0;
    v[(5 * kB + 1) * kH + e] += 3.0;
  }
  const auto y2 = run(changed);
  auto row_equal = [&](std::int64_t i, std::int64_t b) {
    for (std::int64_t e = 0; e < kH; ++e) {
      const auto at = static_cast<std::size_t>((i * kB + b) * kH + e);
      if (y[at] != y2[at]) return false;
    }
    return true;
  };
  for (std::int64_t i = 0; i < 3; ++i)
    EXPECT_TRUE(row_equal(i, 0)) << "sample 0 position " << i << " saw a later position";
  EXPECT_FALSE(row_equal(3, 0));
  EXPECT_FALSE(row_equal(5, 0));
  for (std::int64_t i = 0; i < 4; ++i)
    EXPECT_TRUE(row_equal(i, 1)) << "sample 1 position " << i << " saw padding";

  const Tensor w = random_tensor({s, kB, kH}, 5);
  const auto objective = [&] {
    const auto out = run(x);
    double sum = 0;
    const auto weights = w.to_vector<double>();
    for (std::size_t e = 0; e < out.size(); ++e)
      sum += out[e] * weights[e];
    return sum;
  };
  Tensor y_keep = Tensor::empty(x.shape(), DType::f64), dx = Tensor::empty(x.shape(), DType::f64);
  nn::Layer::Saved saved;
  layer.forward(ctx, x, inputs, y_keep, saved, true);
  layer.backward(ctx, w, inputs, saved, dx);
  test::expect_gradients_match_finite_differences(params, objective);
  expect_input_gradient(x, dx, objective, "dx");

  // Without a padding mask the layer refuses, naming it.
  nn::LayerInputs none;
  Tensor y3 = Tensor::empty(x.shape(), DType::f64);
  nn::Layer::Saved unused;
  EXPECT_THROW(layer.forward(ctx, x, none, y3, unused, false), Error);
}

// A stack of a GPT-style layer then two decoder layers: dropout sites per spec (3 + 5 + 5), and
// full recomputation of every layer gives the same output and gradients (the memory gradient
// is added once per layer backward, never by the recomputed forwards).
TEST(DecoderLayer, StackWithRecomputation) {
  nn::ModelConfig mc;
  mc.transformer = config();
  mc.transformer.num_layers = 3;
  const nn::LayerStack::SpecFn spec = [](std::int64_t layer) {
    return layer > 0 ? nn::decoder_layer_spec(nn::AttentionMask::causal)
                     : nn::transformer_layer_spec();
  };
  struct Run {
    std::vector<double> y, dx, dmemory;
    std::vector<std::vector<double>> grads;
  };
  const auto run = [&](nn::Recompute recompute, std::uint64_t* sites) {
    mc.recompute_granularity = recompute;
    ParameterSet params;
    nn::ParamFactory f{params, Device::cpu(), DType::f64};
    nn::LayerStack stack;
    stack.declare(f, "decoder.layers", mc, spec, {}, 2);
    *sites = stack.dropout_sites();
    randomize(params);
    const nn::LayerContext ctx{cpu(), true, 7, 1};
    Tensor dmemory = Tensor::zeros({kSk, kB, kH}, DType::f64);
    nn::LayerInputs inputs;
    inputs.set(nn::layer_input::memory, random_tensor({kSk, kB, kH}, 2));
    inputs.set(nn::layer_input::memory_padding_mask, memory_padding());
    inputs.collect_gradient(nn::layer_input::memory, dmemory);
    nn::LayerStack::State state;
    const Tensor y =
        stack.forward(ctx, 0, random_tensor({kSq, kB, kH}, 1), inputs, true, state, {});
    const Tensor dx = stack.backward(ctx, 0, random_tensor({kSq, kB, kH}, 3), inputs, state, {});
    Run r{y.to_vector<double>(), dx.to_vector<double>(), dmemory.to_vector<double>(), {}};
    for (auto& p : params)
      r.grads.push_back(p->grad.to_vector<double>());
    return r;
  };
  std::uint64_t sites = 0, sites_recomputed = 0;
  const Run plain = run(nn::Recompute::none, &sites);
  const Run recomputed = run(nn::Recompute::full, &sites_recomputed);
  EXPECT_EQ(sites, 13u);
  EXPECT_EQ(sites_recomputed, 13u);
  EXPECT_EQ(recomputed.y, plain.y);
  EXPECT_EQ(recomputed.dx, plain.dx);
  EXPECT_EQ(recomputed.dmemory, plain.dmemory);
  EXPECT_EQ(recomputed.grads, plain.grads);
  EXPECT_NE(plain.dmemory, std::vector<double>(plain.dmemory.size(), 0.0));
}

}  // namespace
}  // namespace megatron
