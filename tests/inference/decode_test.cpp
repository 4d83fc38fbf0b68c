// Incremental decoding with the KV cache against recomputing the whole sequence: a prompt, then
// one token at a time, gives at every position the logits LanguageModel::logits gives for the
// whole sequence, for a GPT with learned positions, one with rope, grouped queries, SwiGLU and
// RMSNorm, and a MoE GPT, also when sequences at different positions decode together (continuous
// batching, where what runs beside a sequence changes no bit of its logits) and for every
// position of a prompt; a capacity factor or padding-masked attention
// cannot decode.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "common/model_checks.h"
#include "gpt_model.h"
#include "megatron/inference/held_weights.h"

namespace megatron::gpt {
namespace {

constexpr std::int64_t kVocab = 37, kSeq = 9, kBatch = 2, kPrompt = 4;

// The tests' small GPT with dropout set: decoding is evaluation mode, which does not apply it.
GptConfig tiny_config() {
  GptConfig c = test::tiny_gpt_config(24);
  c.transformer.hidden_dropout = 0.1f;
  c.transformer.attention_dropout = 0.1f;
  return c;
}

// Every element within tol x the largest |want|.
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(w[i])));
    worst = std::max(worst, std::abs(static_cast<double>(g[i]) - w[i]));
  }
  EXPECT_LE(worst, tol * scale) << what << ": max |difference| " << worst << ", scale " << scale;
}

std::unique_ptr<GptModel> build(const GptConfig& c, DType compute = DType::f32) {
  auto m = std::make_unique<GptModel>(c);
  ModelBuildInfo info;
  info.vocab_size = kVocab;
  info.seq_length = kSeq;
  info.seed = 77;
  info.compute_dtype = compute;
  m->build(info);
  return m;
}

// Decodes the batch's tokens (a prompt of kPrompt, then one at a time) and compares the logits
// after every position with the whole sequence's.
void expect_decoding_matches_recompute(const GptConfig& c) {
  auto m = build(c);
  ASSERT_TRUE(m->can_decode());
  const Batch batch = test::gpt_batch(kBatch, kSeq, kVocab, 3, [](std::size_t) { return true; });
  const Tensor whole = m->logits(batch);  // (B, S, padded vocab)
  const Tensor& tokens = batch["tokens"];
  nn::LayerStackModel::DecodeState state = m->start_decoding(kBatch, kSeq);
  std::int64_t done = 0;
  while (done < kSeq) {
    const std::int64_t step = done == 0 ? kPrompt : 1;
    const Tensor next = m->decode(state, tokens.slice(1, done, step).contiguous());
    done += step;
    EXPECT_EQ(state.past, done);
    const Tensor expected = whole.select(1, done - 1).contiguous();
    expect_close(next, expected, 2e-5, "logits after position " + std::to_string(done - 1));
  }
}

// Continuous batching: three sequences prefilled alone to different lengths, then decoded one
// token a step together (LanguageModel::decode_ragged), each at its own position; a sequence
// that reaches the end leaves the batch. Each one's logits equal its whole sequence's.
void expect_ragged_matches_recompute(const GptConfig& c) {
  auto m = build(c);
  const Batch batch = test::gpt_batch(3, kSeq, kVocab, 5, [](std::size_t) { return true; });
  const Tensor whole = m->logits(batch);
  const Tensor& tokens = batch["tokens"];
  const std::vector<std::int64_t> prompt = {2, 5, 3};
  std::vector<nn::LayerStackModel::DecodeState> states;
  for (std::int64_t b = 0; b < 3; ++b) {
    states.push_back(m->start_decoding(1, kSeq));
    const Tensor ids = tokens.slice(0, b, 1).slice(1, 0, prompt[b]).contiguous();
    const Tensor logits = m->decode(states.back(), ids, true);  // every prompt position
    expect_close(logits.select(0, 0).contiguous(),
                 whole.select(0, b).slice(0, 0, prompt[b]).contiguous(), 2e-5,
                 "prompt logits of sequence " + std::to_string(b));
  }
  for (;;) {
    std::vector<nn::LayerStackModel::DecodeState*> running;
    std::vector<std::int64_t> which;
    std::vector<std::int32_t> next;
    for (std::int64_t b = 0; b < 3; ++b) {
      auto& st = states[static_cast<std::size_t>(b)];
      if (st.past == kSeq) continue;
      running.push_back(&st);
      which.push_back(b);
      next.push_back(
          tokens.select(0, b).select(0, st.past).contiguous().to_vector<std::int32_t>()[0]);
    }
    if (running.empty()) break;
    const Tensor logits = m->decode_ragged(running, next);
    ASSERT_EQ(logits.size(0), static_cast<std::int64_t>(running.size()));
    for (std::size_t i = 0; i < running.size(); ++i) {
      const std::int64_t pos = running[i]->past - 1;
      expect_close(logits.select(0, static_cast<std::int64_t>(i)).contiguous(),
                   whole.select(0, which[i]).select(0, pos).contiguous(), 2e-5,
                   "sequence " + std::to_string(which[i]) + " at position " + std::to_string(pos) +
                       " beside " + std::to_string(running.size() - 1) + " others");
    }
  }
}

// Decodes each group of five sequences together (prompts prefilled alone, then one token a
// step with decode_ragged) and returns every decoding step's logits, by sequence and position.
std::map<std::pair<std::int64_t, std::int64_t>, std::vector<float>> ragged_logits(
    const GptConfig& c, const std::vector<std::vector<std::int64_t>>& groups) {
  auto m = build(c);
  const Batch batch = test::gpt_batch(5, kSeq, kVocab, 6, [](std::size_t) { return true; });
  const Tensor& tokens = batch["tokens"];
  const std::vector<std::int64_t> prompt = {2, 5, 3, 1, 4};
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<float>> out;
  for (const auto& group : groups) {
    std::vector<nn::LayerStackModel::DecodeState> states;
    for (std::int64_t b : group) {
      states.push_back(m->start_decoding(1, kSeq));
      m->decode(states.back(), tokens.slice(0, b, 1).slice(1, 0, prompt[b]).contiguous());
    }
    for (;;) {
      std::vector<nn::LayerStackModel::DecodeState*> running;
      std::vector<std::int64_t> which;
      std::vector<std::int32_t> next;
      for (std::size_t i = 0; i < group.size(); ++i) {
        if (states[i].past == kSeq) continue;
        running.push_back(&states[i]);
        which.push_back(group[i]);
        next.push_back(tokens.select(0, group[i])
                           .select(0, states[i].past)
                           .contiguous()
                           .to_vector<std::int32_t>()[0]);
      }
      if (running.empty()) break;
      const Tensor logits = m->decode_ragged(running, next);
      for (std::size_t i = 0; i < running.size(); ++i) {
        out[{which[i], running[i]->past - 1}] =
            logits.select(0, static_cast<std::int64_t>(i)).contiguous().to_vector<float>();
      }
    }
  }
  return out;
}

// What runs beside a sequence does not change its logits by a bit (the serving engine's
// promise: a request samples the same tokens alone or in a batch).
void expect_batching_changes_no_bit(const GptConfig& c) {
  const auto together = ragged_logits(c, {{0, 1, 2, 3, 4}});
  const auto alone = ragged_logits(c, {{0}, {1}, {2}, {3}, {4}});
  ASSERT_EQ(together.size(), alone.size());
  for (const auto& [where, logits] : together) {
    EXPECT_TRUE(logits == alone.at(where))
        << "sequence " << where.first << " at position " << where.second;
  }
}

TEST(Decoding, LearnedPositionsMatchRecomputing) {
  expect_decoding_matches_recompute(tiny_config());
  expect_ragged_matches_recompute(tiny_config());
  expect_batching_changes_no_bit(tiny_config());
}

TEST(Decoding, RopeGroupedQueriesSwigluRmsnormMatchRecomputing) {
  GptConfig c = tiny_config();
  c.transformer.num_query_groups = 2;
  c.transformer.normalization = nn::NormKind::rmsnorm;
  c.transformer.swiglu = true;
  c.transformer.add_bias_linear = false;
  c.transformer.rotary_dim = 4;
  c.position_embedding = PositionEmbedding::rope;
  c.untie_embeddings_and_output_weights = true;
  expect_decoding_matches_recompute(c);
  expect_ragged_matches_recompute(c);
  expect_batching_changes_no_bit(c);
}

GptConfig moe_config() {
  GptConfig c = tiny_config();
  c.transformer.add_bias_linear = false;
  nn::MoeConfig& moe = c.transformer.moe;
  moe.num_experts = 4;
  moe.ffn_hidden_size = 8;
  moe.layer_pattern = {1, 0};
  moe.routing.num_experts = 4;
  moe.routing.topk = 2;
  return c;
}

TEST(Decoding, MixtureOfExpertsMatchesRecomputing) {
  expect_decoding_matches_recompute(moe_config());
  expect_ragged_matches_recompute(moe_config());
  expect_batching_changes_no_bit(moe_config());
}

// At the width of configs/gpt_tiny.toml, where the smaller products of a lone sequence and the
// larger of a batch fall on either side of the CPU GEMM's size rules (gemm_policy.h).
TEST(Decoding, BatchingChangesNoBitAtTheServedModelsWidth) {
  GptConfig c = tiny_config();
  c.transformer.hidden_size = 128;
  c.transformer.kv_channels = 32;
  c.transformer.ffn_hidden_size = 512;
  c.transformer.init_method_std = 0.02f;
  expect_batching_changes_no_bit(c);
}

TEST(Decoding, TokenDroppingCannotDecode) {
  GptConfig c = moe_config();
  c.transformer.moe.capacity_factor = 1.0;
  auto m = build(c);
  EXPECT_FALSE(m->can_decode());
  EXPECT_THROW(m->start_decoding(1, kSeq), Error);
}

TEST(Decoding, RefusesMoreTokensThanTheModelIsBuiltFor) {
  auto m = build(tiny_config());
  EXPECT_THROW(m->start_decoding(1, kSeq + 1), Error);
  nn::LayerStackModel::DecodeState state = m->start_decoding(1, 3);
  const Tensor four = Tensor::from(std::vector<std::int32_t>{1, 2, 3, 4}, {1, 4});
  EXPECT_THROW(m->decode(state, four), Error);
}

// Generation with bf16 compute holds each GEMM-only weight (linear layers, experts, the router,
// the untied output layer) and the word embeddings in bf16 alone: the logits equal, bit for bit,
// those of the f32 masters cast at each GEMM (the word embeddings' rows rounded to bf16, as a
// bf16 table gives them); the gradients are released; norms, biases and the position
// embeddings stay f32.
TEST(HeldWeights, Bf16WeightsGiveThePerCallCastsLogits) {
  GptConfig c = moe_config();
  c.untie_embeddings_and_output_weights = true;
  auto m = build(c, DType::bf16);
  Parameter& words = *m->parameters().find("embedding.word_embeddings.weight");
  words.value = words.value.to(DType::bf16).to(DType::f32);
  const Batch batch = test::gpt_batch(kBatch, kSeq, kVocab, 3, [](std::size_t) { return true; });
  const std::vector<float> cast_per_call = m->logits(batch).to_vector<float>();
  const inference::HeldWeights held = inference::hold_for_generation(m->parameters(), DType::bf16);
  EXPECT_EQ(m->logits(batch).to_vector<float>(), cast_per_call);
  std::int64_t bytes = 0, narrowed = 0;
  for (const auto& p : m->parameters()) {
    EXPECT_FALSE(p->grad.defined()) << p->name;
    const bool narrow =
        p->name.ends_with("linear_fc1.weight") || p->name.ends_with("linear_fc2.weight") ||
        p->name.ends_with("linear_qkv.weight") || p->name.ends_with("linear_proj.weight") ||
        p->name.ends_with("router.weight") || p->name == "output_layer.weight" ||
        p->name == "embedding.word_embeddings.weight";
    EXPECT_EQ(p->value.dtype(), narrow ? DType::bf16 : DType::f32) << p->name;
    narrowed += narrow ? 1 : 0;
    bytes += static_cast<std::int64_t>(p->value.nbytes());
  }
  EXPECT_EQ(held.narrowed, narrowed);
  // 2 x (qkv, proj); fc1, fc2; router, experts' fc1, fc2; output layer; word embeddings.
  EXPECT_EQ(narrowed, 11);
  EXPECT_EQ(held.bytes, bytes);
  EXPECT_LT(held.bytes, held.bytes_before / 3);

  // f32 compute narrows nothing and only releases the gradients.
  auto f32 = build(tiny_config());
  const inference::HeldWeights plain =
      inference::hold_for_generation(f32->parameters(), DType::f32);
  EXPECT_EQ(plain.narrowed, 0);
  EXPECT_EQ(plain.bytes * 2, plain.bytes_before);
}

}  // namespace
}  // namespace megatron::gpt
