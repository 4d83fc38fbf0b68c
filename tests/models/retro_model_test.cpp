// The retro model: Megatron's Retro layer numbers, Megatron-core's parameter names and the
// closed-form count, fp64 finite-difference gradients of every parameter through two Retro
// layers (the retriever's encoder, the encoder output buffer shared with a later layer, the
// neighbour embeddings through the shared word and position embeddings), each chunk's neighbours
// reaching only the positions from its last token on, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/model_checks.h"
#include "megatron/error.h"
#include "retro_model.h"

namespace megatron::retro {
namespace {

constexpr std::int64_t kVocab = 23, kSeq = 10, kM = 4, kK = 2, kChunks = 2, kR = kChunks * kM;
constexpr std::int64_t kL = (kSeq + kM - 1) / kM;  // 3 chunks, the first (S % m = 2) padded

RetroConfig tiny_config(std::int64_t layers) {
  RetroConfig c;
  nn::TransformerConfig& t = c.model.transformer;
  t.num_layers = layers;
  t.hidden_size = 8;
  t.num_attention_heads = 2;
  t.num_query_groups = 2;
  t.kv_channels = 4;
  t.ffn_hidden_size = 12;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  t.init_method_std = 0.3f;
  c.chunks = {kM, kK, kR};
  c.encoder = {2, 0.0f, 0.0f};
  return c;
}

std::unique_ptr<RetroModel> build(const RetroConfig& c, DType dtype,
                                  Device device = Device::cpu()) {
  auto m = std::make_unique<RetroModel>(c);
  ModelBuildInfo info;
  info.vocab_size = kVocab;
  info.seq_length = kSeq;
  info.param_dtype = dtype;
  info.device = device;
  info.seed = 17;
  m->build(info);
  return m;
}

Tensor random_neighbors(std::int64_t batch, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * kL * kK * kR));
  for (auto& id : ids)
    id = static_cast<std::int32_t>(rng() % kVocab);
  return Tensor::from(ids, {batch, kL, kK, kR});
}

Batch retro_batch(std::int64_t batch, unsigned seed) {
  Batch b = test::gpt_batch(batch, kSeq, kVocab, seed, [](std::size_t i) { return i % 7 == 3; });
  b.set(kNeighborTokens, random_neighbors(batch, seed + 1));
  return b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(RetroModel, MegatronsRetroLayerNumbers) {
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(retro_layer_numbers(5), V{});
  EXPECT_EQ(retro_layer_numbers(6), V{6});
  EXPECT_EQ(retro_layer_numbers(12), (V{6, 9, 12}));
  EXPECT_EQ(retro_layer_numbers(15), (V{6, 9, 12, 15}));
  EXPECT_EQ(retro_layer_numbers(16), (V{9, 12, 15}));
  EXPECT_EQ(retro_layer_numbers(32), (V{9, 12, 15, 18, 21, 24, 27, 30}));
}

TEST(RetroModel, MegatronParameterNamesAndClosedFormCount) {
  auto m = build(tiny_config(9), DType::f32, Device::meta());
  std::vector<std::string> layer5, layer8;
  for (auto& p : m->parameters()) {
    if (p->name.rfind("decoder.layers.5.", 0) == 0) layer5.push_back(p->name.substr(17));
    if (p->name.rfind("decoder.layers.8.", 0) == 0) layer8.push_back(p->name.substr(17));
  }
  const std::vector<std::string> attention = {"input_layernorm.weight",
                                              "input_layernorm.bias",
                                              "self_attention.linear_qkv.weight",
                                              "self_attention.linear_qkv.bias",
                                              "self_attention.linear_proj.weight",
                                              "self_attention.linear_proj.bias"};
  const std::vector<std::string> cca = {
      "pre_cross_attn_layernorm.weight",         "pre_cross_attn_layernorm.bias",
      "cross_attention.attn.linear_q.weight",    "cross_attention.attn.linear_q.bias",
      "cross_attention.attn.linear_kv.weight",   "cross_attention.attn.linear_kv.bias",
      "cross_attention.attn.linear_proj.weight", "cross_attention.attn.linear_proj.bias"};
  const std::vector<std::string> mlp = {"pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias",
                                        "mlp.linear_fc1.weight",    "mlp.linear_fc1.bias",
                                        "mlp.linear_fc2.weight",    "mlp.linear_fc2.bias"};
  std::vector<std::string> want8 = attention;
  want8.insert(want8.end(), cca.begin(), cca.end());
  want8.insert(want8.end(), mlp.begin(), mlp.end());
  EXPECT_EQ(layer8, want8);
  // Layer 6 (1-based) holds the encoder after its chunked cross-attention.
  ASSERT_GT(layer5.size(), want8.size());
  EXPECT_EQ(layer5[14], "cross_attention.encoder.layers.0.input_layernorm.weight");
  EXPECT_NE(std::find(layer5.begin(), layer5.end(),
                      "cross_attention.encoder.layers.0.pre_cross_attn_layernorm.weight"),
            layer5.end());
  EXPECT_NE(std::find(layer5.begin(), layer5.end(),
                      "cross_attention.encoder.layers.0.cross_attention.attn.linear_q.weight"),
            layer5.end());
  // Megatron's RetroEncoderLayerNorm holds the first encoder layer's pre-MLP norm as `norm`.
  EXPECT_NE(std::find(layer5.begin(), layer5.end(),
                      "cross_attention.encoder.layers.0.pre_mlp_layernorm.norm.weight"),
            layer5.end());
  EXPECT_NE(std::find(layer5.begin(), layer5.end(),
                      "cross_attention.encoder.layers.1.pre_mlp_layernorm.weight"),
            layer5.end());
  EXPECT_NE(std::find(layer5.begin(), layer5.end(),
                      "cross_attention.encoder.layers.1.mlp.linear_fc2.bias"),
            layer5.end());
  // Closed form (biases on, h 8, 2 heads of 4, ffn 12, V 128, learned positions 10, tied).
  const std::int64_t h = 8, f = 12, V = 128, qkv = 3 * 2 * 4;
  const std::int64_t norm = 2 * h, attn = norm + qkv * h + qkv + 8 * h + h;
  const std::int64_t cross = norm + 8 * h + 8 + 16 * h + 16 + 8 * h + h,
                     ffn = norm + 2 * f * h + f + h;
  const std::int64_t gpt_layer = attn + ffn, retro_layer = attn + cross + ffn;
  const std::int64_t encoder = (attn + cross + ffn) + gpt_layer;
  EXPECT_EQ(m->parameters().numel(),
            V * h + kSeq * h + 7 * gpt_layer + 2 * retro_layer + encoder + norm);
}

TEST(RetroModel, GradientsThroughTwoRetroLayersAndTheNeighbourEmbeddings) {
  auto m = build(tiny_config(9), DType::f64);
  const Batch batch = retro_batch(2, 5);
  StepOptions o;
  o.training = false;
  m->step(batch, o);
  StepOptions eval;
  eval.training = false;
  eval.backward = false;
  test::expect_gradients_match_finite_differences(m->parameters(),
                                                  [&] { return m->step(batch, eval).objective(); });
}

// The largest change of any logit at each position (B = 1) when one of chunk 1's neighbours
// changes.
std::vector<double> logit_changes() {
  const RetroConfig c = tiny_config(6);
  auto m = build(c, DType::f64);
  Batch batch = retro_batch(1, 9);
  const Tensor before = m->logits(batch);
  Tensor changed = batch[kNeighborTokens].clone();
  changed.data<std::int32_t>()[(1 * kK + 1) * kR + 2] += 1;  // chunk 1, neighbour 1, token 2
  batch.set(kNeighborTokens, changed);
  const Tensor after = m->logits(batch);
  const std::int64_t vocab = before.size(2);
  std::vector<double> diff(kSeq, 0.0);
  for (std::int64_t s = 0; s < kSeq; ++s)
    for (std::int64_t v = 0; v < vocab; ++v) {
      const std::int64_t i = s * vocab + v;
      diff[static_cast<std::size_t>(s)] =
          std::max(diff[static_cast<std::size_t>(s)],
                   std::abs(after.data<double>()[i] - before.data<double>()[i]));
    }
  return diff;
}

// Chunk c's neighbours reach the sequence at its last token, pad + c m with pad = (S - 1) % m, and
// the m - 1 positions after it; the only Retro layer being the last, no other position changes.
TEST(RetroModel, NeighboursReachOnlyFromTheirChunksLastToken) {
  const std::vector<double> diff = logit_changes();
  const std::int64_t first = (kSeq - 1) % kM + kM;  // chunk 1's last token
  for (std::int64_t s = 0; s < kSeq; ++s) {
    if (s < first || s >= first + kM) {
      EXPECT_EQ(diff[static_cast<std::size_t>(s)], 0.0) << "position " << s;
    } else {
      EXPECT_GT(diff[static_cast<std::size_t>(s)], 1e-9) << "position " << s;
    }
  }
}

TEST(RetroModel, RefusesPipelineUnshardableMismatchedAndUnplacedNeighbours) {
  const RetroConfig c = tiny_config(6);
  ModelBuildInfo info;
  info.vocab_size = kVocab;
  info.seq_length = kSeq;
  info.device = Device::meta();
  info.pipeline.size = 2;
  EXPECT_NE(error_of([&] { RetroModel(c).build(info); }).find("pipeline_model_parallel_size"),
            std::string::npos);
  info.pipeline.size = 1;
  // Sequence parallelism shards the neighbours too: TP must divide the retrieved length.
  info.tp_size = 2;
  info.sequence_parallel = true;
  RetroConfig odd = c;
  odd.chunks.retrieved_length = 5;
  const std::string shards = error_of([&] { RetroModel(odd).build(info); });
  EXPECT_NE(shards.find("sequence_parallel: the neighbours' 5 tokens"), std::string::npos)
      << shards;
  info.tp_size = 1;
  info.sequence_parallel = false;
  info.sample_fields = {{kNeighborTokens, DType::i32, {kL, kK, 2 * kR}, FieldKind::token_ids}};
  const std::string field = error_of([&] { RetroModel(c).build(info); });
  EXPECT_NE(field.find("retro_num_retrieved_chunks"), std::string::npos) << field;
  EXPECT_NE(field.find("[3, 2, 16]"), std::string::npos) << field;

  info.sample_fields.clear();
  RetroConfig long_neighbours = c;
  long_neighbours.chunks.retrieved_length = 3 * kM;  // 12 tokens, 10 learned positions
  const std::string positions = error_of([&] { RetroModel(long_neighbours).build(info); });
  EXPECT_NE(positions.find("max_position_embeddings"), std::string::npos) << positions;

  auto m = build(c, DType::f32);
  Batch batch = retro_batch(2, 3);
  batch.set(kNeighborTokens, random_neighbors(1, 4).view({2, kL, 1, kR}));
  const std::string shape = error_of([&] { m->step(batch, StepOptions{}); });
  EXPECT_NE(shape.find("neighbor_tokens"), std::string::npos) << shape;
}

}  // namespace
}  // namespace megatron::retro
