// The mamba model: fp64 finite-difference gradients of every parameter of pure and hybrid stacks
// (several scan chunks), Megatron-core's parameter names and the closed-form count, Megatron's
// initialisation ranges, the hybrid allocation rule (Megatron's own 8B pattern), pipeline-stage
// boundaries, and the refusals that name their key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/model_checks.h"
#include "mamba_model.h"
#include "megatron/error.h"
#include "megatron/nn/hybrid_layers.h"
#include "megatron/nn/init.h"

namespace megatron::mamba {
namespace {

using nn::allocate_by_ratio;
using nn::allocate_layers;
using nn::HybridLayers;

MambaConfig tiny_config(const std::string& pattern) {
  MambaConfig c;
  nn::TransformerConfig& t = c.model.transformer;
  t.num_layers = static_cast<std::int64_t>(pattern.size());
  t.hidden_size = 16;
  t.num_attention_heads = 4;
  t.num_query_groups = 2;
  t.kv_channels = 4;
  t.ffn_hidden_size = 24;
  t.normalization = nn::NormKind::rmsnorm;
  t.add_bias_linear = false;
  t.gelu = GeluApproximation::none;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  t.mamba_state_dim = 3;
  t.mamba_head_dim = 4;  // d_inner 32: 8 heads
  t.mamba_num_groups = 2;
  t.mamba_chunk_size = 3;
  c.model.position_embedding = nn::PositionEmbedding::none;
  c.model.untie_embeddings_and_output_weights = true;
  c.layers = allocate_layers(t.num_layers, 0, 0, pattern);
  return c;
}

std::unique_ptr<MambaModel> build(const MambaConfig& c, DType dtype, std::int64_t vocab,
                                  std::int64_t seq, Device device = Device::cpu()) {
  auto m = std::make_unique<MambaModel>(c);
  ModelBuildInfo info;
  info.vocab_size = vocab;
  info.seq_length = seq;
  info.param_dtype = dtype;
  info.device = device;
  info.seed = 17;
  m->build(info);
  return m;
}

// The tiny config with Mixture of Experts on the pattern's E layers (3 experts, top-2).
MambaConfig moe_config(const std::string& pattern) {
  MambaConfig c = tiny_config(pattern);
  nn::MoeConfig& m = c.model.transformer.moe;
  m.num_experts = m.routing.num_experts = 3;
  m.routing.topk = 2;
  m.ffn_hidden_size = 8;
  for (const char k : c.layers.kinds)
    m.layer_pattern.push_back(k == 'E' ? 1 : 0);
  return c;
}

void check_gradients(const MambaConfig& config) {
  const std::int64_t vocab = 29, seq = 8;
  auto m = build(config, DType::f64, vocab, seq);
  const Batch batch = test::gpt_batch(2, seq, vocab, 4, [](std::size_t i) { return i % 5 == 2; });
  StepOptions o;
  o.training = false;
  m->step(batch, o);
  StepOptions eval;
  eval.training = false;
  eval.backward = false;
  test::expect_gradients_match_finite_differences(m->parameters(),
                                                  [&] { return m->step(batch, eval).objective(); });
}

TEST(MambaModel, GradientsPureMamba) {
  check_gradients(tiny_config("MM"));
}

TEST(MambaModel, GradientsHybrid) {
  check_gradients(tiny_config("M*-M"));
}

TEST(MambaModel, MoeLayersAreThePatternsE) {
  const MambaConfig c = moe_config("M*E");
  check_gradients(c);
  auto m = build(c, DType::f32, 29, 8, Device::meta());
  std::vector<std::string> layer2;
  for (auto& p : m->parameters())
    if (p->name.rfind("decoder.layers.2.", 0) == 0) layer2.push_back(p->name.substr(17));
  EXPECT_EQ(layer2, (std::vector<std::string>{"pre_mlp_layernorm.weight", "mlp.router.weight",
                                              "mlp.experts.linear_fc1.weight",
                                              "mlp.experts.linear_fc2.weight"}));
  EXPECT_NE(m->describe().find("1 MoE: M*E"), std::string::npos) << m->describe();
}

// Incremental decoding (the conv window and SSM state of each Mamba layer, the KV cache of
// attention layers) gives the logits of recomputing the whole sequence: a prompt, then several
// tokens at once, then one at a time, for two sequences together; and sequences at different
// positions decoded together (continuous batching).
void expect_decoding_matches_recompute(const MambaConfig& config) {
  const std::int64_t vocab = 29, seq = 11;
  auto m = build(config, DType::f32, vocab, seq);
  ASSERT_TRUE(m->can_decode());
  const Batch batch = test::gpt_batch(2, seq, vocab, 6, [](std::size_t) { return true; });
  const Tensor whole = m->logits(batch);  // (B, S, padded vocab)
  const Tensor& tokens = batch["tokens"];
  auto expect_close = [](const Tensor& got, const Tensor& want, const std::string& what) {
    const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    ASSERT_EQ(g.size(), w.size()) << what;
    double scale = 0, worst = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(w[i])));
      worst = std::max(worst, std::abs(static_cast<double>(g[i]) - w[i]));
    }
    EXPECT_LE(worst, 2e-5 * scale) << what << ": max |difference| " << worst;
  };
  nn::LayerStackModel::DecodeState state = m->start_decoding(2, seq);
  for (const std::int64_t step : {4, 3, 1, 1, 1, 1}) {
    const std::int64_t done = state.past;
    const Tensor next = m->decode(state, tokens.slice(1, done, step).contiguous());
    expect_close(next, whole.select(1, done + step - 1).contiguous(),
                 "after position " + std::to_string(done + step - 1));
  }
  // Sequence 0 prefilled with 2 tokens, sequence 1 with 5, then both a token a step.
  std::vector<nn::LayerStackModel::DecodeState> states;
  for (const std::int64_t b : {0, 1}) {
    states.push_back(m->start_decoding(1, seq));
    m->decode(states.back(), tokens.slice(0, b, 1).slice(1, 0, b == 0 ? 2 : 5).contiguous());
  }
  while (states[1].past < seq) {
    std::vector<nn::LayerStackModel::DecodeState*> both = {&states[0], &states[1]};
    std::vector<std::int32_t> next;
    for (std::int64_t b : {0, 1})
      next.push_back(
          tokens.select(0, b).select(0, states[b].past).contiguous().to_vector<std::int32_t>()[0]);
    const Tensor logits = m->decode_ragged(both, next);
    for (std::int64_t b : {0, 1})
      expect_close(logits.select(0, b).contiguous(),
                   whole.select(0, b).select(0, states[b].past - 1).contiguous(),
                   "sequence " + std::to_string(b) + " at " + std::to_string(states[b].past - 1));
  }
}

TEST(MambaModel, DecodingMatchesRecomputingPureAndHybrid) {
  expect_decoding_matches_recompute(tiny_config("MM"));
  expect_decoding_matches_recompute(tiny_config("M*M-"));
  expect_decoding_matches_recompute(moe_config("M*E"));
}

TEST(MambaModel, MegatronParameterNamesAndClosedFormCount) {
  const MambaConfig c = tiny_config("M*-");
  auto m = build(c, DType::f32, 29, 8, Device::meta());
  std::vector<std::string> names;
  for (auto& p : m->parameters())
    names.push_back(p->name);
  const std::vector<std::string> expected = {
      "embedding.word_embeddings.weight",
      "decoder.layers.0.mixer.in_proj.layer_norm_weight",
      "decoder.layers.0.mixer.in_proj.weight",
      "decoder.layers.0.mixer.conv1d.weight",
      "decoder.layers.0.mixer.conv1d.bias",
      "decoder.layers.0.mixer.dt_bias",
      "decoder.layers.0.mixer.A_log",
      "decoder.layers.0.mixer.D",
      "decoder.layers.0.mixer.norm.weight",
      "decoder.layers.0.mixer.out_proj.weight",
      "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight",
      "decoder.layers.1.self_attention.linear_qkv.weight",
      "decoder.layers.1.self_attention.linear_proj.weight",
      "decoder.layers.2.mlp.linear_fc1.layer_norm_weight",
      "decoder.layers.2.mlp.linear_fc1.weight",
      "decoder.layers.2.mlp.linear_fc2.weight",
      "decoder.final_norm.weight",
      "output_layer.weight"};
  EXPECT_EQ(names, expected);
  // Closed form: h = 16, V = 128 (29 padded), d_inner 32, 8 heads, 2 groups of state 3, kernel 4.
  const std::int64_t h = 16, V = 128, di = 32, H = 8, G = 2, N = 3, K = 4;
  const std::int64_t mamba =
      h + (2 * di + 2 * G * N + H) * h + (di + 2 * G * N) * (K + 1) + 3 * H + di + di * h;
  const std::int64_t attention = h + (4 + 2 * 2) * 4 * h + 4 * 4 * h;
  const std::int64_t mlp = h + 24 * h + h * 24;
  EXPECT_EQ(m->parameters().numel(), V * h + mamba + attention + mlp + h + V * h);
  EXPECT_EQ(m->parameters().find("decoder.layers.0.mixer.in_proj.weight")->global_shape,
            (Shape{2 * di + 2 * G * N + H, h}));
  EXPECT_EQ(m->parameters().find("decoder.layers.0.mixer.conv1d.weight")->global_shape,
            (Shape{di + 2 * G * N, 1, K}));
}

TEST(MambaModel, MegatronInitialisation) {
  MambaConfig c = tiny_config("M");
  c.model.transformer.hidden_size = 64;
  c.model.transformer.mamba_head_dim = 1;  // 128 heads, to see the distributions
  c.model.transformer.mamba_num_groups = 1;
  auto m = build(c, DType::f32, 29, 8);
  auto values = [&](const std::string& name) {
    return m->parameters().find("decoder.layers.0.mixer." + name)->value.to_vector<double>();
  };
  for (double a : values("A_log")) {  // log U[1, 16]
    EXPECT_GE(a, 0.0);
    EXPECT_LE(a, std::log(16.0) + 1e-6);
  }
  for (double b : values("dt_bias")) {  // softplus(dt_bias) in [1e-3, 0.1]
    const double dt = std::log1p(std::exp(b));
    EXPECT_GE(dt, 1e-3 - 1e-7);
    EXPECT_LE(dt, 0.1 + 1e-6);
  }
  for (double d : values("D"))
    EXPECT_EQ(d, 1.0);
  const auto conv = values("conv1d.weight");
  EXPECT_LE(*std::max_element(conv.begin(), conv.end()), 0.5);
  EXPECT_GE(*std::min_element(conv.begin(), conv.end()), -0.5);
  EXPECT_GT(*std::max_element(conv.begin(), conv.end()), 0.4);  // uniform, not normal(0.02)
  const auto a = values("A_log");
  EXPECT_GT(*std::max_element(a.begin(), a.end()) - *std::min_element(a.begin(), a.end()), 1.5);
  EXPECT_FALSE(m->parameters().find("decoder.layers.0.mixer.A_log")->weight_decay);
  EXPECT_TRUE(m->parameters().find("decoder.layers.0.mixer.conv1d.weight")->weight_decay);
}

TEST(HybridLayers, MegatronsRatioRuleGivesThe8BPattern) {
  // examples/mamba/train.sh 8B: 56 layers, --hybrid-attention-ratio 0.08, --hybrid-mlp-ratio 0.5.
  EXPECT_EQ(allocate_by_ratio(56, 0.08, 0.5),
            "M-M-M--M-M*-M-M-M-M--M*-M-M-M-M-M*--M-M-M-M-M*-M--M-M-M-");
  // Printed by Megatron's own _allocate_auto (core_v0.13.0).
  EXPECT_EQ(allocate_by_ratio(9, 0, 0), "MMMMMMMMM");
  EXPECT_EQ(allocate_by_ratio(8, 0.25, 0), "MM*MM*MM");
  EXPECT_EQ(allocate_by_ratio(10, 0.3, 0.3), "M-*MM*-*M-");
}

TEST(HybridLayers, PatternsWithStageBoundaries) {
  const HybridLayers l = allocate_layers(6, 0, 0, std::string("M*|-M|MM"));
  EXPECT_EQ(l.kinds, "M*-MMM");
  EXPECT_EQ(l.stage_layers, (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_TRUE(allocate_layers(3, 0, 0, std::string("M*-")).stage_layers.empty());
}

TEST(HybridLayers, RefusalsNameTheKey) {
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] {
              allocate_layers(4, 0, 0, std::string("M*-"));
            }).find("hybrid_layer_pattern: the pattern has 3 layers but num_layers is 4"),
            std::string::npos);
  EXPECT_NE(message([] {
              allocate_layers(3, 0, 0, std::string("M+-"));
            }).find("'+' at position 2 is not a layer kind"),
            std::string::npos);
  EXPECT_NE(message([] { allocate_layers(3, 0, 0, std::string("M||*-")); }).find("without layers"),
            std::string::npos);
  EXPECT_NE(message([] {
              allocate_layers(8, 0.25, 0, std::string("MMMMMMM*"));
            }).find("differ from what hybrid_attention_ratio"),
            std::string::npos);
  EXPECT_NE(message([] { allocate_layers(4, 0.7, 0.5, std::nullopt); }).find("sum to at most 1"),
            std::string::npos);
}

TEST(MambaModel, TensorParallelRefusalsNameTheKeys) {
  MambaConfig c = tiny_config("M");
  ModelBuildInfo info;
  info.vocab_size = 29;
  info.seq_length = 8;
  info.device = Device::meta();
  info.tp_size = 3;  // 8 heads and 2 groups do not divide by 3
  MambaModel m(c);
  try {
    m.build(info);
    FAIL() << "TP 3 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_model_parallel_size"), std::string::npos)
        << e.what();
  }
  c.model.transformer.mamba_num_groups = 1;  // 1 group cannot be split over 2 ranks
  info.tp_size = 2;
  MambaModel m2(c);
  try {
    m2.build(info);
    FAIL() << "1 group at TP 2 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mamba_num_groups"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace megatron::mamba
