// BERT model: fp64 finite-difference gradients of every parameter tensor (with and without the
// binary head), Megatron-core's parameter names, and what the padding mask hides.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "bert_model.h"
#include "bert_test_config.h"
#include "common/model_checks.h"

namespace megatron::bert {
namespace {

BertConfig tiny_config(bool binary_head) {
  return tiny_bert_config(binary_head);
}

// Samples of length s with `real[b]` real tokens then padding; labels -1 except at masked
// positions, which carry the loss.
Batch make_batch(const std::vector<std::int64_t>& real, std::int64_t s, std::int64_t vocab,
                 unsigned seed) {
  const auto b = static_cast<std::int64_t>(real.size());
  std::mt19937 rng(seed);
  std::vector<std::int32_t> text(static_cast<std::size_t>(b * s)), types(text.size()),
      labels(text.size(), -1), padding(text.size()), is_random(static_cast<std::size_t>(b));
  std::vector<float> loss_mask(text.size(), 0.0f);
  for (std::int64_t i = 0; i < b; ++i) {
    is_random[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(rng() % 2);
    for (std::int64_t j = 0; j < s; ++j) {
      const auto k = static_cast<std::size_t>(i * s + j);
      const bool is_real = j < real[static_cast<std::size_t>(i)];
      text[k] = is_real ? static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab)) : 0;
      types[k] = is_real && j > 2 ? 1 : 0;
      padding[k] = is_real ? 1 : 0;
      if (is_real && j % 3 == 1) {
        labels[k] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
        loss_mask[k] = 1.0f;
      }
    }
  }
  Batch batch;
  batch.set("text", Tensor::from(text, {b, s}));
  batch.set("types", Tensor::from(types, {b, s}));
  batch.set("labels", Tensor::from(labels, {b, s}));
  batch.set("loss_mask", Tensor::from(loss_mask, {b, s}));
  batch.set("padding_mask", Tensor::from(padding, {b, s}));
  batch.set("is_random", Tensor::from(is_random, {b}));
  return batch;
}

std::unique_ptr<BertModel> build(const BertConfig& c, DType dtype, std::int64_t vocab,
                                 std::int64_t seq) {
  auto m = std::make_unique<BertModel>(c);
  ModelBuildInfo info;
  info.vocab_size = vocab;
  info.seq_length = seq;
  info.param_dtype = dtype;
  info.seed = 91;
  m->build(info);
  return m;
}

StepResult forward(BertModel& m, const Batch& batch) {
  StepOptions o;
  o.backward = false;
  o.training = false;
  return m.step(batch, o);
}

void check_gradients(bool binary_head) {
  const std::int64_t vocab = 37, seq = 7;
  auto m = build(tiny_config(binary_head), DType::f64, vocab, seq);
  const Batch batch = make_batch({7, 5, 4}, seq, vocab, 5);
  StepOptions o;
  o.training = false;
  const StepResult r = m->step(batch, o);
  ASSERT_EQ(r.losses.size(), binary_head ? 2u : 1u);
  EXPECT_EQ(r.losses[0].name, "lm loss");
  if (binary_head) {
    EXPECT_EQ(r.losses[1].name, "sop loss");
  }
  test::expect_gradients_match_finite_differences(m->parameters(),
                                                  [&] { return forward(*m, batch).objective(); });
}

TEST(BertModel, GradientsWithBinaryHead) {
  check_gradients(true);
}

TEST(BertModel, GradientsWithoutBinaryHead) {
  check_gradients(false);
}

TEST(BertModel, ParameterNamesAreMegatronCoresLocalSpec) {
  auto m = build(tiny_config(true), DType::f32, 37, 7);
  std::set<std::string> names;
  for (const auto& p : m->parameters())
    names.insert(p->name);
  for (const char* name :
       {"embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
        "embedding.tokentype_embeddings.weight", "encoder.layers.0.input_layernorm.weight",
        "encoder.layers.1.self_attention.linear_qkv.weight", "encoder.layers.1.mlp.linear_fc2.bias",
        "encoder.final_layernorm.weight", "lm_head.dense.weight", "lm_head.dense.bias",
        "lm_head.layer_norm.weight", "lm_head.layer_norm.bias", "output_layer.bias",
        "pooler.dense.weight", "pooler.dense.bias", "binary_head.weight", "binary_head.bias"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_FALSE(names.count("output_layer.weight"));  // tied to the word embeddings
  EXPECT_EQ(m->parameters().find("binary_head.weight")->global_shape, (Shape{2, 16}));
  EXPECT_EQ(m->parameters().find("output_layer.bias")->global_shape, (Shape{40}));

  auto plain = build(tiny_config(false), DType::f32, 37, 7);
  EXPECT_EQ(plain->parameters().find("pooler.dense.weight"), nullptr);
  EXPECT_EQ(plain->parameters().find("embedding.tokentype_embeddings.weight"), nullptr);
}

TEST(BertModel, PaddedTokensDoNotChangeTheLosses) {
  auto m = build(tiny_config(true), DType::f64, 37, 7);
  const Batch batch = make_batch({7, 5, 4}, 7, 37, 8);
  const StepResult before = forward(*m, batch);
  // Other ids and types behind the padding: the real positions see no padded key.
  Batch changed = make_batch({7, 5, 4}, 7, 37, 8);
  std::int32_t* text = changed["text"].data<std::int32_t>();
  std::int32_t* types = changed["types"].data<std::int32_t>();
  text[1 * 7 + 6] = 11;
  text[2 * 7 + 5] = 29;
  types[2 * 7 + 6] = 1;
  const StepResult after = forward(*m, changed);
  EXPECT_DOUBLE_EQ(before.losses[0].sum, after.losses[0].sum);
  EXPECT_DOUBLE_EQ(before.losses[1].sum, after.losses[1].sum);
  // ... while a real token does change them.
  changed["text"].data<std::int32_t>()[1 * 7 + 2] = 3;
  EXPECT_NE(forward(*m, changed).losses[0].sum, before.losses[0].sum);
}

}  // namespace
}  // namespace megatron::bert
