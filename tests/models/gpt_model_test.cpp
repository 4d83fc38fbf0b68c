// GPT model: fp64 finite-difference gradients for every parameter tensor, recomputation giving
// identical gradients, dropout streams, parameter names and counts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/model_checks.h"
#include "gpt_model.h"
#include "megatron/nn/init.h"

namespace megatron::gpt {
namespace {

GptConfig tiny_config() {
  return test::tiny_gpt_config(24);
}

Batch make_batch(std::int64_t b, std::int64_t s, std::int64_t vocab, unsigned seed,
                 bool partial_mask) {
  return test::gpt_batch(b, s, vocab, seed,
                         [&](std::size_t i) { return partial_mask && i % 3 == 1; });
}

LossTerm lm_loss(const StepResult& r) {
  return test::only_loss(r);
}

std::unique_ptr<GptModel> build(const GptConfig& c, DType dtype, std::int64_t vocab,
                                std::int64_t seq) {
  auto m = std::make_unique<GptModel>(c);
  ModelBuildInfo info;
  info.vocab_size = vocab;
  info.seq_length = seq;
  info.param_dtype = dtype;
  info.seed = 77;
  m->build(info);
  return m;
}

double mean_loss(GptModel& m, const Batch& batch) {
  StepOptions o;
  o.backward = false;
  o.training = false;
  const LossTerm r = lm_loss(m.step(batch, o));
  return r.sum / r.count;
}

// Central differences on a few elements of every parameter tensor, in fp64.
void check_gradients(const GptConfig& c, bool partial_mask) {
  const std::int64_t vocab = 37, seq = 5;
  auto m = build(c, DType::f64, vocab, seq);
  const Batch batch = make_batch(2, seq, vocab, 5, partial_mask);
  StepOptions o;
  o.training = false;
  m->step(batch, o);
  test::expect_gradients_match_finite_differences(m->parameters(),
                                                  [&] { return mean_loss(*m, batch); });
}

TEST(GptModel, GradientsLearnedLayerNormGeluTied) {
  check_gradients(tiny_config(), false);
}

TEST(GptModel, GradientsRopeRmsNormSwigluUntiedGqaNoBias) {
  GptConfig c = tiny_config();
  c.transformer.num_query_groups = 2;
  c.transformer.normalization = nn::NormKind::rmsnorm;
  c.transformer.swiglu = true;
  c.transformer.add_bias_linear = false;
  c.transformer.add_qkv_bias = false;
  c.transformer.rotary_dim = 4;
  c.position_embedding = PositionEmbedding::rope;
  c.untie_embeddings_and_output_weights = true;
  check_gradients(c, true);
}

TEST(GptModel, GradientsPartialRotaryKvChannelsAndErfGelu) {
  GptConfig c = tiny_config();
  c.transformer.kv_channels = 6;  // heads x kv_channels != hidden
  c.transformer.num_query_groups = 1;
  c.transformer.gelu = GeluApproximation::none;
  c.transformer.rotary_dim = 2;
  c.position_embedding = PositionEmbedding::rope;
  check_gradients(c, true);
}

// Two documents packed in one sample, the second at [start, seq): Megatron's reset_position_ids
// and reset_attention_mask fields as the gpt dataset writes them.
void add_document_fields(Batch& batch, std::int64_t start) {
  const std::int64_t b = batch["tokens"].size(0), s = batch["tokens"].size(1);
  std::vector<std::int32_t> positions, first;
  for (std::int64_t r = 0; r < b; ++r) {
    for (std::int64_t i = 0; i < s; ++i) {
      positions.push_back(static_cast<std::int32_t>(i < start ? i : i - start));
      first.push_back(static_cast<std::int32_t>(i < start ? 0 : start));
    }
  }
  batch.set("position_ids", Tensor::from(positions, {b, s}));
  batch.set("attention_mask", Tensor::from(first, {b, s}));
}

TEST(GptModel, GradientsWithResetPositionIdsAndAttentionMask) {
  const std::int64_t vocab = 37, seq = 7;
  auto m = build(tiny_config(), DType::f64, vocab, seq);
  Batch batch = make_batch(2, seq, vocab, 6, true);
  add_document_fields(batch, 3);
  StepOptions o;
  o.training = false;
  m->step(batch, o);
  test::expect_gradients_match_finite_differences(m->parameters(),
                                                  [&] { return mean_loss(*m, batch); });
}

// What reset_position_ids + reset_attention_mask are for: a document packed after another one
// gives the loss and every gradient it gives alone at the start of a sample.
TEST(GptModel, PackedDocumentWithResetFieldsEqualsTheDocumentAlone) {
  const std::int64_t vocab = 37, seq = 12, start = 5, length = seq - start;
  // Packed: [first document | second document], loss on the second only.
  Batch packed = test::gpt_batch(1, seq, vocab, 8, [&](std::size_t i) { return i < start; });
  add_document_fields(packed, start);
  // Alone: the second document first, then tokens that causal attention keeps it from seeing.
  const Batch random = test::gpt_batch(1, seq, vocab, 9, [](std::size_t) { return false; });
  std::vector<std::int32_t> tokens = random["tokens"].to_vector<std::int32_t>();
  std::vector<std::int32_t> labels = random["labels"].to_vector<std::int32_t>();
  const auto packed_tokens = packed["tokens"].to_vector<std::int32_t>();
  const auto packed_labels = packed["labels"].to_vector<std::int32_t>();
  std::vector<float> mask(static_cast<std::size_t>(seq), 0.0f);
  for (std::size_t i = 0; i < static_cast<std::size_t>(length); ++i) {
    tokens[i] = packed_tokens[static_cast<std::size_t>(start) + i];
    labels[i] = packed_labels[static_cast<std::size_t>(start) + i];
    mask[i] = 1.0f;
  }
  Batch alone;
  alone.set("tokens", Tensor::from(tokens, {1, seq}));
  alone.set("labels", Tensor::from(labels, {1, seq}));
  alone.set("loss_mask", Tensor::from(mask, {1, seq}));

  auto packed_model = build(tiny_config(), DType::f64, vocab, seq);
  auto alone_model = build(tiny_config(), DType::f64, vocab, seq);
  StepOptions o;
  o.training = false;
  const LossTerm a = lm_loss(packed_model->step(packed, o));
  const LossTerm b = lm_loss(alone_model->step(alone, o));
  EXPECT_EQ(a.count, b.count);
  EXPECT_NEAR(a.sum, b.sum, 1e-12 * std::abs(b.sum));
  auto& pa = packed_model->parameters();
  auto& pb = alone_model->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t t = 0; t < pa.size(); ++t) {
    const auto ga = pa[t].grad.to_vector<double>(), gb = pb[t].grad.to_vector<double>();
    ASSERT_EQ(ga.size(), gb.size());
    for (std::size_t i = 0; i < ga.size(); ++i)
      ASSERT_NEAR(ga[i], gb[i], 1e-12) << pa[t].name << "[" << i << "]";
  }

  // Without the fields the second document sees the first one: another loss.
  Batch plain;
  for (const char* field : {"tokens", "labels", "loss_mask"})
    plain.set(field, packed[field]);
  auto plain_model = build(tiny_config(), DType::f64, vocab, seq);
  EXPECT_GT(std::abs(lm_loss(plain_model->step(plain, o)).sum - b.sum), 1e-6);
}

// Megatron-core's GPTModel gives position_ids to learned embeddings only; rope ignores them.
TEST(GptModel, RopeIgnoresPositionIds) {
  GptConfig c = tiny_config();
  c.transformer.rotary_dim = 4;
  c.position_embedding = PositionEmbedding::rope;
  auto m = build(c, DType::f64, 37, 6);
  const Batch plain = make_batch(2, 6, 37, 10, false);
  Batch with_fields = make_batch(2, 6, 37, 10, false);
  add_document_fields(with_fields, 2);
  Batch positions_only;
  for (const char* field : {"tokens", "labels", "loss_mask", "position_ids"})
    positions_only.set(field, with_fields[field]);
  StepOptions o;
  o.training = false;
  o.backward = false;
  EXPECT_EQ(lm_loss(m->step(positions_only, o)).sum, lm_loss(m->step(plain, o)).sum);
}

std::vector<std::vector<float>> gradients(GptModel& m) {
  std::vector<std::vector<float>> out;
  for (auto& p : m.parameters())
    out.push_back(p->grad.to_vector<float>());
  return out;
}

// Recomputed layers rerun the same ops with the same dropout streams: identical bits.
TEST(GptModel, RecomputationGivesIdenticalGradients) {
  GptConfig base = tiny_config();
  base.transformer.num_layers = 4;
  base.transformer.hidden_dropout = 0.1f;
  base.transformer.attention_dropout = 0.1f;
  const Batch batch = make_batch(2, 8, 37, 9, true);
  StepOptions o;
  o.dropout_offset = 12;
  auto reference = build(base, DType::f32, 37, 8);
  const StepResult r0 = reference->step(batch, o);
  const auto g0 = gradients(*reference);
  for (auto method : {RecomputeMethod::uniform, RecomputeMethod::block}) {
    for (std::int64_t n : {1, 2, 3}) {
      GptConfig c = base;
      c.recompute_granularity = Recompute::full;
      c.recompute_method = method;
      c.recompute_num_layers = n;
      auto m = build(c, DType::f32, 37, 8);
      const StepResult r = m->step(batch, o);
      EXPECT_EQ(lm_loss(r).sum, lm_loss(r0).sum);
      EXPECT_EQ(gradients(*m), g0) << "method " << int(method) << " n " << n;
    }
  }
}

TEST(GptModel, DropoutStreamsAreDeterministicAndDistinct) {
  GptConfig c = tiny_config();
  c.transformer.hidden_dropout = 0.2f;
  c.transformer.attention_dropout = 0.2f;
  auto m = build(c, DType::f32, 37, 8);
  const Batch batch = make_batch(2, 8, 37, 1, false);
  StepOptions o;
  o.backward = false;
  o.dropout_offset = 5;
  const double a = lm_loss(m->step(batch, o)).sum, b = lm_loss(m->step(batch, o)).sum;
  o.dropout_offset = 6;
  const double c6 = lm_loss(m->step(batch, o)).sum;
  o.training = false;
  const double eval = lm_loss(m->step(batch, o)).sum;
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c6);
  EXPECT_NE(a, eval);
}

TEST(GptModel, MegatronParameterNamesAndClosedFormCount) {
  GptConfig c = tiny_config();
  c.transformer.ffn_hidden_size = 64;  // 4h
  auto m = build(c, DType::f32, 37, 8);
  const std::int64_t h = 16, L = 2, V = 40, P = 8;
  // Megatron's count: V h + P h + L (12 h^2 + 13 h) + 2 h for a tied, biased, 4h-MLP GPT.
  EXPECT_EQ(m->parameters().numel(), V * h + P * h + L * (12 * h * h + 13 * h) + 2 * h);
  for (const char* name :
       {"embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
        "decoder.layers.0.input_layernorm.weight", "decoder.layers.0.input_layernorm.bias",
        "decoder.layers.1.self_attention.linear_qkv.weight",
        "decoder.layers.1.self_attention.linear_qkv.bias",
        "decoder.layers.1.self_attention.linear_proj.weight",
        "decoder.layers.1.pre_mlp_layernorm.weight", "decoder.layers.1.mlp.linear_fc1.weight",
        "decoder.layers.1.mlp.linear_fc2.bias", "decoder.final_layernorm.weight"}) {
    EXPECT_NE(m->parameters().find(name), nullptr) << name;
  }
  EXPECT_EQ(m->parameters().find("output_layer.weight"), nullptr);
  EXPECT_EQ(m->parameters().find("decoder.layers.0.self_attention.linear_qkv.weight")->global_shape,
            (Shape{3 * h, h}));
  EXPECT_FALSE(m->parameters().find("decoder.layers.0.mlp.linear_fc1.bias")->weight_decay);
  EXPECT_TRUE(m->parameters().find("decoder.layers.0.mlp.linear_fc1.weight")->weight_decay);
}

TEST(GptModel, MetaDeviceDeclaresWithoutAllocating) {
  GptConfig c = tiny_config();
  auto m = std::make_unique<GptModel>(c);
  ModelBuildInfo info;
  info.vocab_size = 50257;
  info.seq_length = 16;
  info.device = Device::meta();
  m->build(info);
  EXPECT_EQ(m->padded_vocab_size(), 50264);  // multiple of 8
  EXPECT_TRUE(m->parameters()[0].value.device().is_meta());
}

}  // namespace
}  // namespace megatron::gpt

namespace megatron::gpt {
namespace {

// bf16/fp16 compute casts the GEMM inputs: logits move by bf16/fp16 rounding, not more, and the
// gradients still match fp32 closely.
TEST(GptModel, ReducedPrecisionGemmsStayCloseToFp32) {
  const GptConfig c = tiny_config();
  const Batch batch = make_batch(2, 8, 37, 4, false);
  auto reference = build(c, DType::f32, 37, 8);
  const std::vector<float> exact = reference->logits(batch).to_vector<float>();
  for (DType compute : {DType::bf16, DType::f16}) {
    auto m = std::make_unique<GptModel>(c);
    ModelBuildInfo info;
    info.vocab_size = 37;
    info.seq_length = 8;
    info.seed = 77;
    info.compute_dtype = compute;
    m->build(info);
    const std::vector<float> got = m->logits(batch).to_vector<float>();
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, double(std::abs(got[i] - exact[i])));
      scale = std::max(scale, double(std::abs(exact[i])));
    }
    // bf16 keeps 8 significant bits, fp16 11: relative errors near 2^-9 and 2^-12.
    const double expected = compute == DType::bf16 ? 1.0 / 512 : 1.0 / 4096;
    EXPECT_GT(worst, expected * scale * 1e-3) << "no rounding at all: the cast is not applied";
    EXPECT_LT(worst, expected * scale * 20) << dtype_name(compute);
  }
}

}  // namespace
}  // namespace megatron::gpt
