// T5 model: fp64 finite-difference gradients of every parameter tensor (learned, rope and
// relative positions; untied head), Megatron-core's parameter names, what the masks hide
// (encoder padding, decoder padding and future tokens), recomputation, the training loop's
// hooks, and the configurations it refuses.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "common/model_checks.h"
#include "megatron/error.h"
#include "megatron/nn/init.h"
#include "t5_model.h"

namespace megatron::t5 {
namespace {

constexpr std::int64_t kVocab = 37, kEnc = 9, kDec = 6;

T5Config tiny_config(nn::PositionEmbedding positions = nn::PositionEmbedding::learned_absolute) {
  T5Config c;
  nn::TransformerConfig& t = c.model.transformer;
  c.encoder_num_layers = 2;
  c.decoder_num_layers = t.num_layers = 1;  // different counts: the stacks are not confused
  t.hidden_size = 16;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 4;
  t.ffn_hidden_size = 24;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  t.init_method_std = 0.2f;  // large enough that every path carries a visible gradient
  c.model.make_vocab_size_divisible_by = 8;
  c.model.position_embedding = positions;
  if (positions == nn::PositionEmbedding::rope) t.rotary_dim = 4;
  // Few buckets and a short distance, so a 9-token encoder reaches the logarithmic buckets.
  c.relative_attention_num_buckets = 8;
  c.relative_attention_max_distance = 6;
  return c;
}

// Samples with enc_real[b] / dec_real[b] real tokens then padding; every real decoder position
// carries the loss.
Batch make_batch(const std::vector<std::int64_t>& enc_real,
                 const std::vector<std::int64_t>& dec_real, unsigned seed) {
  const auto b = static_cast<std::int64_t>(enc_real.size());
  std::mt19937 rng(seed);
  auto fill = [&](std::int64_t s, const std::vector<std::int64_t>& real,
                  std::vector<std::int32_t>& ids, std::vector<std::int32_t>& mask) {
    ids.assign(static_cast<std::size_t>(b * s), 0);
    mask.assign(ids.size(), 0);
    for (std::int64_t i = 0; i < b; ++i) {
      for (std::int64_t j = 0; j < real[static_cast<std::size_t>(i)]; ++j) {
        ids[static_cast<std::size_t>(i * s + j)] =
            static_cast<std::int32_t>(1 + rng() % (kVocab - 1));
        mask[static_cast<std::size_t>(i * s + j)] = 1;
      }
    }
  };
  std::vector<std::int32_t> text_enc, enc_mask, text_dec, dec_mask;
  fill(kEnc, enc_real, text_enc, enc_mask);
  fill(kDec, dec_real, text_dec, dec_mask);
  std::vector<std::int32_t> labels(text_dec.size(), 0);
  std::vector<float> loss_mask(text_dec.size(), 0.0f);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (!dec_mask[i]) continue;
    labels[i] = static_cast<std::int32_t>(rng() % kVocab);
    loss_mask[i] = 1.0f;
  }
  Batch batch;
  batch.set("text_enc", Tensor::from(text_enc, {b, kEnc}));
  batch.set("text_dec", Tensor::from(text_dec, {b, kDec}));
  batch.set("labels", Tensor::from(labels, {b, kDec}));
  batch.set("loss_mask", Tensor::from(loss_mask, {b, kDec}));
  batch.set("enc_mask", Tensor::from(enc_mask, {b, kEnc}));
  batch.set("dec_mask", Tensor::from(dec_mask, {b, kDec}));
  return batch;
}

ModelBuildInfo build_info(DType dtype) {
  ModelBuildInfo info;
  info.vocab_size = kVocab;
  info.seq_length = kEnc;
  info.sample_fields = {{"text_dec", DType::i32, {kDec}, FieldKind::token_ids}};
  info.param_dtype = dtype;
  info.seed = 91;
  return info;
}

std::unique_ptr<T5Model> build(const T5Config& c, DType dtype = DType::f64) {
  auto m = std::make_unique<T5Model>(c);
  m->build(build_info(dtype));
  nn::zero_gradients(backend_for(Device::cpu()), m->parameters());
  return m;
}

double forward_loss(T5Model& m, const Batch& batch) {
  StepOptions o;
  o.backward = false;
  o.training = false;
  const LossTerm loss = test::only_loss(m.step(batch, o));
  return loss.sum / loss.count;
}

void check_gradients(const T5Config& c) {
  auto m = build(c);
  const Batch batch = make_batch({9, 6, 4}, {6, 4, 2}, 5);
  StepOptions o;
  o.training = false;
  const LossTerm loss = test::only_loss(m->step(batch, o));
  EXPECT_EQ(loss.count, 12.0);
  // step's gradients are of the token-averaged objective.
  test::expect_gradients_match_finite_differences(m->parameters(),
                                                  [&] { return forward_loss(*m, batch); });
}

TEST(T5Model, GradientsWithLearnedPositions) {
  check_gradients(tiny_config());
}

TEST(T5Model, GradientsWithRelativePositionBias) {
  check_gradients(tiny_config(nn::PositionEmbedding::relative));
}

TEST(T5Model, GradientsWithRopeAndUntiedHead) {
  T5Config c = tiny_config(nn::PositionEmbedding::rope);
  c.model.untie_embeddings_and_output_weights = true;
  check_gradients(c);
}

TEST(T5Model, ParameterNamesAreMegatronCoresLocalSpec) {
  auto m = build(tiny_config(nn::PositionEmbedding::relative), DType::f32);
  std::set<std::string> names;
  for (const auto& p : m->parameters())
    names.insert(p->name);
  for (const char* name :
       {"embedding.word_embeddings.weight",
        "encoder_relative_pos_emb.relative_attention_bias.weight",
        "decoder_relative_pos_emb.relative_attention_bias.weight",
        "encoder.layers.1.self_attention.linear_qkv.weight", "encoder.layers.0.mlp.linear_fc2.bias",
        "encoder.final_layernorm.weight", "decoder.layers.0.input_layernorm.weight",
        "decoder.layers.0.pre_cross_attn_layernorm.weight",
        "decoder.layers.0.cross_attention.linear_q.weight",
        "decoder.layers.0.cross_attention.linear_kv.weight",
        "decoder.layers.0.cross_attention.linear_proj.bias",
        "decoder.layers.0.pre_mlp_layernorm.bias", "decoder.final_layernorm.bias",
        "lm_head.output_layer.bias"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_FALSE(names.count("encoder.layers.2.input_layernorm.weight"));
  EXPECT_FALSE(names.count("decoder.layers.1.input_layernorm.weight"));
  EXPECT_FALSE(names.count("embedding.position_embeddings.weight"));  // relative positions
  EXPECT_FALSE(names.count("encoder.layers.0.cross_attention.linear_q.weight"));
  EXPECT_EQ(m->parameters().find("lm_head.output_layer.bias")->global_shape, (Shape{40}));
  EXPECT_EQ(
      m->parameters().find("decoder_relative_pos_emb.relative_attention_bias.weight")->global_shape,
      (Shape{8, 4}));

  T5Config untied = tiny_config();
  untied.model.untie_embeddings_and_output_weights = true;
  auto u = build(untied, DType::f32);
  EXPECT_NE(u->parameters().find("lm_head.output_layer.weight"), nullptr);
  EXPECT_NE(u->parameters().find("embedding.position_embeddings.weight"), nullptr);
  EXPECT_EQ(u->parameters().find("lm_head.output_layer.bias"), nullptr);  // as T5LMHead
}

TEST(T5Model, PaddingAndFutureTokensDoNotChangeTheLoss) {
  for (auto positions :
       {nn::PositionEmbedding::learned_absolute, nn::PositionEmbedding::relative}) {
    auto m = build(tiny_config(positions));
    const Batch batch = make_batch({9, 6, 4}, {6, 4, 2}, 8);
    const double before = forward_loss(*m, batch);
    // Other ids behind the encoder's and the decoder's padding.
    Batch changed = make_batch({9, 6, 4}, {6, 4, 2}, 8);
    changed["text_enc"].data<std::int32_t>()[1 * kEnc + 7] = 11;
    changed["text_enc"].data<std::int32_t>()[2 * kEnc + 4] = 29;
    changed["text_dec"].data<std::int32_t>()[2 * kDec + 3] = 5;
    EXPECT_DOUBLE_EQ(forward_loss(*m, changed), before);
    // A decoder token changes the losses of its own and later positions only.
    Batch last_only = make_batch({9, 6, 4}, {6, 4, 2}, 8);
    float* mask = last_only["loss_mask"].data<float>();
    for (std::int64_t i = 0; i < 3 * kDec; ++i)
      mask[i] = i == 0 * kDec + 2 ? 1.0f : 0.0f;  // sample 0, position 2
    const double position2 = forward_loss(*m, last_only);
    last_only["text_dec"].data<std::int32_t>()[0 * kDec + 3] = 7;
    EXPECT_DOUBLE_EQ(forward_loss(*m, last_only), position2);
    last_only["text_dec"].data<std::int32_t>()[0 * kDec + 1] = 7;
    EXPECT_NE(forward_loss(*m, last_only), position2);
    // ... and every real encoder token reaches the decoder (bidirectional, cross-attended).
    last_only["text_dec"].data<std::int32_t>()[0 * kDec + 1] =
        make_batch({9, 6, 4}, {6, 4, 2}, 8)["text_dec"].data<std::int32_t>()[1];
    EXPECT_DOUBLE_EQ(forward_loss(*m, last_only), position2);
    last_only["text_enc"].data<std::int32_t>()[0 * kEnc + 8] = 3;
    EXPECT_NE(forward_loss(*m, last_only), position2);
  }
}

TEST(T5Model, FullRecomputationGivesTheSameGradients) {
  auto plain = build(tiny_config(nn::PositionEmbedding::relative));
  T5Config rc = tiny_config(nn::PositionEmbedding::relative);
  rc.model.recompute_granularity = nn::Recompute::full;
  auto recomputed = build(rc);
  const Batch batch = make_batch({9, 6, 4}, {6, 4, 2}, 3);
  StepOptions o;
  o.training = false;
  EXPECT_DOUBLE_EQ(test::only_loss(plain->step(batch, o)).sum,
                   test::only_loss(recomputed->step(batch, o)).sum);
  for (auto& p : plain->parameters()) {
    const Parameter* q = recomputed->parameters().find(p->name);
    ASSERT_NE(q, nullptr) << p->name;
    for (std::int64_t i = 0; i < p->grad.numel(); ++i)
      ASSERT_EQ(p->grad.data<double>()[i], q->grad.data<double>()[i]) << p->name << "[" << i << "]";
  }
}

TEST(T5Model, HooksSeeEveryParameterOnceBeforeUseAndAfterItsLastGradient) {
  auto m = build(tiny_config(nn::PositionEmbedding::relative));
  const Batch batch = make_batch({9, 6, 4}, {6, 4, 2}, 4);
  std::map<const Parameter*, int> needed, ready;
  StepOptions o;
  o.training = false;
  o.params_needed = [&](const std::vector<Parameter*>& ps) {
    for (Parameter* p : ps)
      ++needed[p];
  };
  // A parameter reported ready must not change afterwards: snapshot its gradient.
  std::map<const Parameter*, Tensor> at_ready;
  o.grads_ready = [&](const std::vector<Parameter*>& ps) {
    for (Parameter* p : ps) {
      ++ready[p];
      at_ready[p] = p->grad.clone();
    }
  };
  m->step(batch, o);
  for (auto& p : m->parameters()) {
    EXPECT_EQ(needed[p.get()], 1) << p->name;
    EXPECT_EQ(ready[p.get()], 1) << p->name;
    const Tensor& snap = at_ready[p.get()];
    for (std::int64_t i = 0; i < p->grad.numel(); ++i)
      ASSERT_EQ(snap.data<double>()[i], p->grad.data<double>()[i]) << p->name;
  }
}

TEST(T5Model, RefusesWhatItCannotRun) {
  auto refuse = [](const T5Config& c, ModelBuildInfo info, const std::string& fragment) {
    T5Model m(c);
    try {
      m.build(info);
      ADD_FAILURE() << "built; expected an error mentioning " << fragment;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  ModelBuildInfo gpt_data = build_info(DType::f32);
  gpt_data.sample_fields = {{"tokens", DType::i32, {kEnc}, FieldKind::token_ids}};
  refuse(tiny_config(), gpt_data, "text_dec");
  // 2 + 1 layers cannot fill whole encoder stages then whole decoder stages on 2 stages.
  ModelBuildInfo pipeline = build_info(DType::f32);
  pipeline.pipeline.size = 2;
  pipeline.pipeline.chunks = {{0, 1}};
  refuse(tiny_config(), pipeline, "T5 runs whole encoder stages, then whole decoder stages");
  ModelBuildInfo interleaved = build_info(DType::f32);
  interleaved.pipeline.size = 1;
  interleaved.pipeline.chunks = {{0, 2}, {2, 1}};
  refuse(tiny_config(), interleaved, "interleaved");
  T5Config short_table = tiny_config();
  short_table.model.max_position_embeddings = 8;
  refuse(short_table, build_info(DType::f32), "max_position_embeddings");
}

TEST(T5Model, PipelineStagesHoldWholeStacksAndShareTheirCopies) {
  // 2 + 2 layers on 4 stages: two encoder stages, then two decoder stages.
  T5Config c = tiny_config(nn::PositionEmbedding::relative);
  c.decoder_num_layers = c.model.transformer.num_layers = 2;
  std::vector<std::unique_ptr<T5Model>> stages;
  for (int r = 0; r < 4; ++r) {
    ModelBuildInfo info = build_info(DType::f32);
    info.pipeline.rank = r;
    info.pipeline.size = 4;
    info.pipeline.chunks = {{r, 1}};
    stages.push_back(std::make_unique<T5Model>(c));
    stages.back()->build(info);
  }
  auto holders = [&](int stage, const std::string& name) {
    const Parameter* p = stages[static_cast<std::size_t>(stage)]->parameters().find(name);
    return p ? p->pipeline_holders : std::vector<int>{-1};
  };
  const std::string word = "embedding.word_embeddings.weight";
  EXPECT_EQ(holders(0, word), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(holders(2, word), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(holders(3, word), (std::vector<int>{0, 2, 3}));  // the tied head's copy
  EXPECT_EQ(holders(1, word), (std::vector<int>{-1}));
  const std::string enc_table = "encoder_relative_pos_emb.relative_attention_bias.weight";
  const std::string dec_table = "decoder_relative_pos_emb.relative_attention_bias.weight";
  EXPECT_EQ(holders(1, enc_table), (std::vector<int>{0, 1}));
  EXPECT_EQ(holders(3, dec_table), (std::vector<int>{2, 3}));
  EXPECT_EQ(holders(2, enc_table), (std::vector<int>{-1}));
  auto holds = [&](int stage, const std::string& name) {
    return stages[static_cast<std::size_t>(stage)]->parameters().find(name) != nullptr;
  };
  EXPECT_TRUE(holds(0, "encoder.layers.0.self_attention.linear_qkv.weight"));
  EXPECT_TRUE(holds(1, "encoder.layers.1.self_attention.linear_qkv.weight"));
  EXPECT_TRUE(holds(1, "encoder.final_layernorm.weight"));
  EXPECT_FALSE(holds(0, "encoder.final_layernorm.weight"));
  EXPECT_TRUE(holds(2, "decoder.layers.0.cross_attention.linear_kv.weight"));
  EXPECT_TRUE(holds(3, "decoder.layers.1.cross_attention.linear_kv.weight"));
  EXPECT_TRUE(holds(3, "lm_head.output_layer.bias"));
  EXPECT_FALSE(holds(2, "lm_head.output_layer.bias"));
  // Every copy starts equal: the same name draws the same initialisation stream.
  const Tensor& first = stages[0]->parameters().find(word)->value;
  const Tensor& last = stages[3]->parameters().find(word)->value;
  for (std::int64_t i = 0; i < first.numel(); ++i)
    ASSERT_EQ(first.data<float>()[i], last.data<float>()[i]);
  // What passes between the stages.
  EXPECT_EQ(stages[0]->stage_inputs(1, 2)[0].name, "hidden");
  EXPECT_EQ(stages[0]->stage_inputs(2, 2).size(), 1u);
  EXPECT_EQ(stages[0]->stage_inputs(2, 2)[0].name, "encoder_output");
  EXPECT_EQ(stages[0]->stage_inputs(2, 2)[0].shape, (Shape{kEnc, 2, 16}));
  const SampleSpec later = stages[0]->stage_inputs(3, 2);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].shape, (Shape{kDec, 2, 16}));
  EXPECT_EQ(later[1].name, "encoder_output");
}

}  // namespace
}  // namespace megatron::t5
