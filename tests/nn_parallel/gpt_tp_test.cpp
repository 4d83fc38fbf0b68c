// The GPT model at TP2 and TP2 + sequence parallelism against TP1 on the same rank: the same seed
// gives the same global weights, and one training step gives the same loss (1e-5 relative) and
// the same gradients (each rank's = its slice of the TP1 ones, within 2e-5 of each tensor's
// scale, fp32); plus the tensor-parallel config checks and meta-device shards for `plan`.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/model_checks.h"
#include "gpt_model.h"
#include "megatron/error.h"
#include "tp_test_util.h"

namespace megatron::tp_test {
namespace {

// 45 tokens pad to 48 both at TP1 (multiple of 8) and TP2 (multiple of 16), so both layouts
// have the same global tensors.
constexpr std::int64_t kVocab = 45, kSeq = 8, kBatch = 2;

gpt::GptConfig learned_layernorm_gelu_tied() {
  return test::tiny_gpt_config(32);
}

gpt::GptConfig rope_rmsnorm_swiglu_gqa_untied() {
  gpt::GptConfig c = learned_layernorm_gelu_tied();
  nn::TransformerConfig& t = c.transformer;
  t.num_query_groups = 2;
  t.normalization = nn::NormKind::rmsnorm;
  t.swiglu = true;
  t.add_bias_linear = false;
  t.rotary_dim = 4;
  c.position_embedding = gpt::PositionEmbedding::rope;
  c.untie_embeddings_and_output_weights = true;
  return c;
}

std::unique_ptr<gpt::GptModel> build(const gpt::GptConfig& c, const nn::TensorParallelism* tp,
                                     Device device = Device::cpu()) {
  auto m = std::make_unique<gpt::GptModel>(c);
  ModelBuildInfo info;
  info.vocab_size = kVocab;
  info.seq_length = kSeq;
  info.device = device;
  info.seed = 1234;
  if (tp) {
    info.tensor_comm = tp->comm;
    info.tp_rank = tp->rank;
    info.tp_size = tp->size;
    info.sequence_parallel = tp->sequence_parallel;
  }
  m->build(info);
  return m;
}

Batch make_batch(unsigned seed) {
  return test::gpt_batch(kBatch, kSeq, kVocab, seed, [](std::size_t i) { return i % 5 == 2; });
}

LossTerm lm_loss(const StepResult& r) {
  return test::only_loss(r);
}

void compare_layouts(const gpt::GptConfig& c, bool sequence_parallel, float hidden_dropout = 0) {
  gpt::GptConfig config = c;
  config.transformer.hidden_dropout = hidden_dropout;
  const nn::TensorParallelism tp = tensor_group(sequence_parallel);
  auto single = build(config, nullptr);
  auto split = build(config, &tp);
  ASSERT_EQ(single->padded_vocab_size(), split->padded_vocab_size());
  ParameterSet& ps = single->parameters();
  ParameterSet& pt = split->parameters();
  ASSERT_EQ(ps.size(), pt.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(pt[i].name, ps[i].name);
    EXPECT_EQ(pt[i].value.to_vector<float>(), shard_of(pt[i], ps[i].value).to_vector<float>())
        << pt[i].name << ": TP" << tp.size << " initialisation is not the slice of TP1's";
  }

  const Batch batch = make_batch(3);
  StepOptions o;
  o.loss_scale = 2.0f;
  o.dropout_seed = 11;
  o.dropout_offset = 5;
  std::size_t reported = 0;
  o.grads_ready = [&](const std::vector<Parameter*>& done) { reported += done.size(); };
  const LossTerm rs = lm_loss(single->step(batch, o));
  reported = 0;
  const LossTerm rt = lm_loss(split->step(batch, o));
  EXPECT_EQ(reported, pt.size()) << "every parameter reported once";
  EXPECT_EQ(rt.count, rs.count);
  EXPECT_NEAR(rt.sum, rs.sum, 1e-5 * rs.sum);

  reduce_sequence_parallel_grads(pt, tp);
  for (std::size_t i = 0; i < ps.size(); ++i)
    expect_close(pt[i].grad, shard_of(pt[i], ps[i].grad), 2e-5, pt[i].name + " grad");
}

TEST(GptTensorParallel, LearnedLayerNormGeluTied) {
  compare_layouts(learned_layernorm_gelu_tied(), false);
}

TEST(GptTensorParallel, LearnedLayerNormGeluTiedSequenceParallel) {
  compare_layouts(learned_layernorm_gelu_tied(), true);
}

TEST(GptTensorParallel, RopeRmsNormSwigluGqaUntied) {
  compare_layouts(rope_rmsnorm_swiglu_gqa_untied(), false);
}

TEST(GptTensorParallel, RopeRmsNormSwigluGqaUntiedSequenceParallel) {
  compare_layouts(rope_rmsnorm_swiglu_gqa_untied(), true);
}

// Embedding and hidden dropout masks do not depend on the layout (attention dropout does).
TEST(GptTensorParallel, HiddenDropoutMatchesSingleRank) {
  compare_layouts(learned_layernorm_gelu_tied(), false, 0.1f);
  compare_layouts(learned_layernorm_gelu_tied(), true, 0.1f);
}

// `plan` builds on the meta device without a communicator: shards are declared, and each split
// parameter holds global / TP elements, which is how memory_plan counts per-rank parameters.
TEST(GptTensorParallel, MetaDeviceDeclaresShards) {
  nn::TensorParallelism tp;
  tp.size = 2;
  auto m = build(rope_rmsnorm_swiglu_gqa_untied(), &tp, Device::meta());
  for (const auto& p : m->parameters()) {
    const std::int64_t global = shape_numel(p->global_shape);
    EXPECT_EQ(shape_numel(p->value.shape()), p->partition_dim >= 0 ? global / 2 : global)
        << p->name;
    EXPECT_EQ(p->partition_count, p->partition_dim >= 0 ? 2 : 1) << p->name;
  }
  EXPECT_EQ(m->parameters().find("decoder.layers.0.mlp.linear_fc1.weight")->partition_blocks, 2);
}

void expect_config_error(const gpt::GptConfig& c, int tp_size, const std::string& key) {
  nn::TensorParallelism tp;
  tp.size = tp_size;
  try {
    build(c, &tp, Device::meta());
    ADD_FAILURE() << "no ConfigError for " << key;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor_model_parallel_size"), std::string::npos)
        << e.what();
  }
}

TEST(GptTensorParallel, ConfigErrorsNameTheIndivisibleKey) {
  expect_config_error(learned_layernorm_gelu_tied(), 3, "num_attention_heads");
  gpt::GptConfig c = learned_layernorm_gelu_tied();
  c.transformer.num_query_groups = 1;
  expect_config_error(c, 2, "num_query_groups");
  c = learned_layernorm_gelu_tied();
  c.transformer.ffn_hidden_size = 30;
  expect_config_error(c, 4, "ffn_hidden_size");
}

}  // namespace
}  // namespace megatron::tp_test
