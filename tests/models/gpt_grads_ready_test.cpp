// GPT's StepOptions::grads_ready: every parameter is reported exactly once per step, and only
// when its gradient is final (the data-parallel overlap reduces what it is handed at once).
#include <gtest/gtest.h>

#include <algorithm>
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
  return {Tensor::from(tokens, {b, s}), Tensor::from(labels, {b, s}), Tensor::from(mask, {b, s})};
}

void check_reports(bool untied, bool recompute) {
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
  GptModel model(c);
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

TEST(GptGradsReady, TiedEmbeddingReportedOnceAfterItsLastUse) { check_reports(false, false); }
TEST(GptGradsReady, UntiedOutputLayer) { check_reports(true, false); }
TEST(GptGradsReady, WithFullRecomputation) { check_reports(false, true); }

}  // namespace
}  // namespace megatron::gpt
