// The retro model at TP2 (and TP2 with sequence parallelism) against TP1 on the same rank: the
// same seed gives the same global weights, and one training step (hidden dropout on, in the decoder
// and the retrieval encoder) gives the same loss (1e-5 relative) and the same gradients (each
// rank's = its slice of the TP1 ones, within 2e-5 of each tensor's scale, fp32).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/model_checks.h"
#include "retro_model.h"
#include "tp_test_util.h"

namespace megatron::tp_test {
namespace {

constexpr std::int64_t kVocab = 45, kSeq = 10, kBatch = 2, kM = 4, kK = 2, kR = 8;
constexpr std::int64_t kL = (kSeq + kM - 1) / kM;

retro::RetroConfig config() {
  retro::RetroConfig c;
  nn::TransformerConfig& t = c.model.transformer;
  t.num_layers = 9;
  t.hidden_size = 16;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 4;
  t.ffn_hidden_size = 32;
  t.hidden_dropout = 0.1f;
  t.attention_dropout = 0;
  t.init_method_std = 0.2f;
  c.model.make_vocab_size_divisible_by = 8;
  c.chunks = {kM, kK, kR};
  c.encoder = {2, 0.1f, 0.0f};
  return c;
}

std::unique_ptr<retro::RetroModel> build(const retro::RetroConfig& c,
                                         const nn::TensorParallelism* tp) {
  auto m = std::make_unique<retro::RetroModel>(c);
  ModelBuildInfo info;
  info.vocab_size = kVocab;
  info.seq_length = kSeq;
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
  Batch b = test::gpt_batch(kBatch, kSeq, kVocab, seed, [](std::size_t i) { return i % 5 == 2; });
  std::mt19937 rng(seed + 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kBatch * kL * kK * kR));
  for (auto& id : ids)
    id = static_cast<std::int32_t>(rng() % kVocab);
  b.set(retro::kNeighborTokens, Tensor::from(ids, {kBatch, kL, kK, kR}));
  return b;
}

void compare_layouts(bool sequence_parallel) {
  const nn::TensorParallelism tp = tensor_group(sequence_parallel);
  auto single = build(config(), nullptr);
  auto split = build(config(), &tp);
  ParameterSet& ps = single->parameters();
  ParameterSet& pt = split->parameters();
  ASSERT_EQ(ps.size(), pt.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(pt[i].name, ps[i].name);
    EXPECT_EQ(pt[i].value.to_vector<float>(), shard_of(pt[i], ps[i].value).to_vector<float>())
        << pt[i].name << ": TP2 initialisation is not the slice of TP1's";
  }
  const Batch batch = make_batch(3);
  StepOptions o;
  o.loss_scale = 2.0f;
  o.dropout_seed = 11;
  o.dropout_offset = 5;
  const LossTerm rs = test::only_loss(single->step(batch, o));
  const LossTerm rt = test::only_loss(split->step(batch, o));
  EXPECT_EQ(rt.count, rs.count);
  EXPECT_NEAR(rt.sum, rs.sum, 1e-5 * rs.sum);
  reduce_sequence_parallel_grads(pt, tp);
  for (std::size_t i = 0; i < ps.size(); ++i)
    expect_close(pt[i].grad, shard_of(pt[i], ps[i].grad), 2e-5, pt[i].name + " grad");
}

TEST(RetroTensorParallel, MatchesOneRank) {
  compare_layouts(false);
}

// Sequence parallelism (Megatron refuses it for Retro): the decoder in sequence shards (10 / 2
// tokens; the chunked cross-attentions gather the sequence), the neighbours embedded in shards
// (8 / 2 tokens) and gathered for the encoder.
TEST(RetroTensorParallel, WithSequenceParallelismMatchesOneRank) {
  compare_layouts(true);
}

}  // namespace
}  // namespace megatron::tp_test
