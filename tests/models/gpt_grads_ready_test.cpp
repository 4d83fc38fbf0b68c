// GPT's StepOptions hooks. grads_ready: every parameter is reported exactly once per step, and
// only when its gradient is final (the data-parallel overlap reduces what it is handed at once).
// params_needed: every parameter is named before forward first reads it (the overlapped
// all-gather of the distributed optimizer completes what it is handed at once).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "gpt_model.h"

namespace megatron::gpt {
namespace {

Batch random_batch(std::int64_t b, std::int64_t s, std::int64_t vocab) {
  std::mt19937 rng(3);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(b * s)), labels(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
    labels[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
  }
  std::vector<float> mask(tokens.size(), 1.0f);
  Batch batch;
  batch.set("tokens", Tensor::from(tokens, {b, s}));
  batch.set("labels", Tensor::from(labels, {b, s}));
  batch.set("loss_mask", Tensor::from(mask, {b, s}));
  return batch;
}

GptConfig small_config(bool untied, bool recompute) {
  GptConfig c;
  c.transformer.num_layers = 3;
  c.transformer.hidden_size = 16;
  c.transformer.num_attention_heads = 2;
  c.transformer.num_query_groups = 2;
  c.transformer.kv_channels = 8;
  c.transformer.ffn_hidden_size = 32;
  c.make_vocab_size_divisible_by = 8;
  c.untie_embeddings_and_output_weights = untied;
  if (recompute) {
    c.recompute_granularity = Recompute::full;
    c.recompute_method = RecomputeMethod::uniform;
    c.recompute_num_layers = 2;
  }
  return c;
}

void check_reports(bool untied, bool recompute) {
  GptModel model(small_config(untied, recompute));
  ModelBuildInfo info;
  info.vocab_size = 40;
  info.seq_length = 8;
  model.build(info);

  std::map<std::string, std::vector<float>> at_report;
  std::vector<std::string> order;
  StepOptions o;
  o.grads_ready = [&](const std::vector<Parameter*>& ready) {
    for (Parameter* p : ready) {
      EXPECT_FALSE(at_report.count(p->name)) << p->name << " reported twice";
      at_report[p->name] = p->grad.to_vector<float>();
      order.push_back(p->name);
    }
  };
  model.step(random_batch(2, 8, 40), o);

  ASSERT_EQ(at_report.size(), model.parameters().size());
  for (auto& p : model.parameters()) {
    ASSERT_TRUE(at_report.count(p->name)) << p->name << " never reported";
    EXPECT_EQ(at_report[p->name], p->grad.to_vector<float>())
        << p->name << " changed after it was reported ready";
  }
  // Backward order: the last layer's parameters come before the first layer's, embeddings last.
  auto position = [&](const std::string& name) {
    return std::find(order.begin(), order.end(), name) - order.begin();
  };
  EXPECT_LT(position("decoder.layers.2.mlp.linear_fc2.weight"),
            position("decoder.layers.0.mlp.linear_fc2.weight"));
  EXPECT_EQ(order.back().rfind("embedding.", 0), 0u) << order.back();
}

// Every value starts as NaN and is only restored when params_needed names it: a parameter read
// before it is named poisons the loss or a gradient.
void check_params_needed(bool untied, bool recompute) {
  ModelBuildInfo info;
  info.vocab_size = 40;
  info.seq_length = 8;
  GptModel reference(small_config(untied, recompute)), model(small_config(untied, recompute));
  reference.build(info);
  model.build(info);
  const Batch batch = random_batch(2, 8, 40);
  const StepResult want = reference.step(batch, StepOptions{});

  std::map<std::string, std::vector<float>> saved;
  for (auto& p : model.parameters()) {
    saved[p->name] = p->value.to_vector<float>();
    float* v = p->value.data<float>();
    std::fill(v, v + p->value.numel(), std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<std::string> order;
  StepOptions o;
  o.params_needed = [&](const std::vector<Parameter*>& needed) {
    for (Parameter* p : needed) {
      if (std::find(order.begin(), order.end(), p->name) == order.end()) order.push_back(p->name);
      const std::vector<float>& v = saved.at(p->name);
      std::copy(v.begin(), v.end(), p->value.data<float>());
    }
  };
  const StepResult got = model.step(batch, o);
  EXPECT_EQ(order.size(), model.parameters().size());
  ASSERT_NE(got.find("lm loss"), nullptr);
  ASSERT_NE(want.find("lm loss"), nullptr);
  EXPECT_EQ(got.find("lm loss")->sum, want.find("lm loss")->sum);
  for (std::size_t k = 0; k < model.parameters().size(); ++k) {
    EXPECT_EQ(model.parameters()[k].grad.to_vector<float>(),
              reference.parameters()[k].grad.to_vector<float>())
        << model.parameters()[k].name;
  }
  // Forward order: embedding, layers 0..2, then the head.
  auto position = [&](const std::string& name) {
    return std::find(order.begin(), order.end(), name) - order.begin();
  };
  EXPECT_EQ(order.front().rfind("embedding.", 0), 0u) << order.front();
  EXPECT_LT(position("decoder.layers.0.mlp.linear_fc2.weight"),
            position("decoder.layers.2.mlp.linear_fc2.weight"));
  EXPECT_LT(position("decoder.layers.2.mlp.linear_fc2.weight"),
            position("decoder.final_layernorm.weight"));
}

TEST(GptParamsNeeded, TiedEmbedding) {
  check_params_needed(false, false);
}
TEST(GptParamsNeeded, UntiedWithFullRecomputation) {
  check_params_needed(true, true);
}

TEST(GptGradsReady, TiedEmbeddingReportedOnceAfterItsLastUse) {
  check_reports(false, false);
}
TEST(GptGradsReady, UntiedOutputLayer) {
  check_reports(true, false);
}
TEST(GptGradsReady, WithFullRecomputation) {
  check_reports(false, true);
}

}  // namespace
}  // namespace megatron::gpt
