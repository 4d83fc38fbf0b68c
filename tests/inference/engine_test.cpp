// The generation engine (continuous batching) on a small random GPT: every request gets the
// tokens it gets alone and the tokens of recomputing its whole sequence each step, however the
// requests arrive and whatever runs beside them (greedy and seeded sampling); log-probabilities
// equal log-softmax of the recomputed logits; length, sequence-length, stop-string and
// end-of-document stops; a cancelled request leaves the batch.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/model_checks.h"
#include "gpt_model.h"
#include "megatron/inference/engine.h"
#include "megatron/tokenizer/null_tokenizer.h"

namespace megatron::inference {
namespace {

constexpr std::int64_t kVocab = 37, kSeq = 24;

std::unique_ptr<gpt::GptModel> build() {
  gpt::GptConfig c = test::tiny_gpt_config(24);
  c.transformer.num_query_groups = 2;
  c.transformer.rotary_dim = 4;
  c.position_embedding = gpt::PositionEmbedding::rope;
  auto m = std::make_unique<gpt::GptModel>(c);
  ModelBuildInfo info;
  info.vocab_size = kVocab;
  info.seq_length = kSeq;
  info.seed = 91;
  m->build(info);
  return m;
}

// A GPT dataset's fields at the test's sequence length.
SampleSpec fields() {
  return {{"tokens", DType::i32, {kSeq}, FieldKind::token_ids},
          {"labels", DType::i32, {kSeq}, FieldKind::labels},
          {"loss_mask", DType::f32, {kSeq}, FieldKind::mask}};
}

struct Result {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs, prompt_logprobs;
  std::string reason, error;
  bool done = false;
};

class Recorder : public GenerationSink {
 public:
  explicit Recorder(Result& r, int cancel_after = -1) : r_(r), cancel_after_(cancel_after) {}
  void prompt_logprobs(std::vector<float> lp) override { r_.prompt_logprobs = std::move(lp); }
  void token(const Token& t) override {
    r_.tokens.push_back(t.id);
    r_.logprobs.push_back(t.logprob);
  }
  void finished(StopReason reason, const std::string& error) override {
    r_.reason = stop_reason_name(reason);
    r_.error = error;
    r_.done = true;
  }
  bool cancelled() const override {
    return cancel_after_ >= 0 && static_cast<int>(r_.tokens.size()) >= cancel_after_;
  }

 private:
  Result& r_;
  int cancel_after_;
};

GenerationRequest request(std::vector<TokenId> prompt, std::int64_t n, std::int64_t top_k,
                          std::uint64_t seed) {
  GenerationRequest q;
  q.prompt = std::move(prompt);
  q.tokens_to_generate = n;
  q.sampling.top_k = top_k;
  q.sampling.temperature = top_k == 1 ? 1.0 : 0.7;
  q.seed = seed;
  q.logprobs = true;
  return q;
}

std::vector<GenerationRequest> requests() {
  return {request({3, 7, 1}, 12, 1, 0), request({5}, 9, 4, 11),
          request({2, 2, 9, 30, 4, 8}, 14, 1, 0), request({16, 8}, 10, 6, 12),
          request({1, 2, 3, 4}, 11, 0, 13)};
}

// Every request alone, one after the other, through `decoder`.
std::vector<Result> alone(Decoder& decoder, const Tokenizer& tok) {
  std::vector<Result> out(requests().size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    Engine engine(decoder, tok, kVocab, 1);
    engine.submit(requests()[i], std::make_shared<Recorder>(out[i]));
    while (engine.pending() > 0)
      engine.step();
    EXPECT_EQ(out[i].error, "") << "request " << i << " alone";
  }
  return out;
}

void expect_same_tokens(const std::vector<Result>& got, const std::vector<Result>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].done) << what << " request " << i;
    EXPECT_EQ(got[i].error, "") << what << " request " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ": request " << i;
    EXPECT_EQ(got[i].reason, want[i].reason) << what << ": request " << i;
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
    for (std::size_t t = 0; t < got[i].logprobs.size(); ++t)
      EXPECT_NEAR(got[i].logprobs[t], want[i].logprobs[t], 1e-4) << what << " request " << i;
    ASSERT_EQ(got[i].prompt_logprobs.size(), want[i].prompt_logprobs.size());
    for (std::size_t t = 0; t < got[i].prompt_logprobs.size(); ++t)
      EXPECT_NEAR(got[i].prompt_logprobs[t], want[i].prompt_logprobs[t], 1e-4) << what;
  }
}

TEST(Engine, BatchedRequestsGetTheirTokensAlone) {
  auto m = build();
  NullTokenizer tok(kVocab);
  auto cached = kv_cache_decoder(*m, kSeq);
  auto recomputed = recomputing_decoder(*m, fields(), kSeq, tok.eod());
  const std::vector<Result> reference = alone(*recomputed, tok);
  expect_same_tokens(alone(*cached, tok), reference, "KV cache alone");
  for (const std::int64_t max_batch : {2, 5}) {
    // Two requests first, the rest joining while those decode.
    std::vector<Result> got(requests().size());
    Engine engine(*cached, tok, kVocab, max_batch);
    for (std::size_t i = 0; i < 2; ++i)
      engine.submit(requests()[i], std::make_shared<Recorder>(got[i]));
    for (int s = 0; s < 3; ++s)
      engine.step();
    EXPECT_EQ(got[0].tokens.size(), 4u);  // each step admits (a first token), then decodes
    for (std::size_t i = 2; i < got.size(); ++i)
      engine.submit(requests()[i], std::make_shared<Recorder>(got[i]));
    while (engine.pending() > 0)
      engine.step();
    expect_same_tokens(got, reference, "batch of " + std::to_string(max_batch));
  }
  // The sampled requests really sampled (not greedy), and their seeds matter.
  EXPECT_NE(reference[1].tokens, reference[3].tokens);
}

TEST(Engine, LogprobsAreLogSoftmaxOfTheLogits) {
  auto m = build();
  NullTokenizer tok(kVocab);
  auto cached = kv_cache_decoder(*m, kSeq);
  Result r;
  Engine engine(*cached, tok, kVocab, 4);
  engine.submit(request({4, 9, 13}, 5, 1, 0), std::make_shared<Recorder>(r));
  while (engine.pending() > 0)
    engine.step();
  std::vector<TokenId> ids = {4, 9, 13};
  ids.insert(ids.end(), r.tokens.begin(), r.tokens.end());
  Batch mine = Batch::allocate(fields(), 1);
  auto tokens = mine.sample(0).i32("tokens");
  std::fill(tokens.begin(), tokens.end(), 0);
  std::copy(ids.begin(), ids.end(), tokens.begin());
  const std::vector<float> logits = m->logits(mine).to_vector<float>();
  const std::int64_t v = static_cast<std::int64_t>(logits.size()) / kSeq;
  auto logprob = [&](std::size_t pos, TokenId id) {
    const float* row = logits.data() + static_cast<std::int64_t>(pos) * v;
    double sum = 0;
    for (std::int64_t j = 0; j < v; ++j)
      sum += std::exp(static_cast<double>(row[j]));
    return row[id] - std::log(sum);
  };
  ASSERT_EQ(r.prompt_logprobs.size(), 2u);
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
    const double want = logprob(i, ids[i + 1]);
    const float got = i < 2 ? r.prompt_logprobs[i] : r.logprobs[i - 2];
    EXPECT_NEAR(got, want, 1e-4) << "position " << i;
  }
}

TEST(Engine, StopsAndCancels) {
  auto m = build();
  NullTokenizer tok(kVocab);
  auto cached = kv_cache_decoder(*m, kSeq);
  std::map<std::string, Result> r;
  Engine engine(*cached, tok, kVocab, 8);
  // The sequence length: 20 prompt ids leave room for 4 tokens.
  engine.submit(request(std::vector<TokenId>(20, 3), 10, 1, 0),
                std::make_shared<Recorder>(r["full"]));
  engine.submit(request({5, 6}, 7, 1, 0), std::make_shared<Recorder>(r["length"]));
  engine.submit(request({5, 6}, 0, 1, 0), std::make_shared<Recorder>(r["prompt only"]));
  engine.submit(request({7, 8}, 20, 1, 0), std::make_shared<Recorder>(r["cancelled"], 2));
  while (engine.pending() > 0)
    engine.step();
  EXPECT_EQ(r["full"].reason, "seq_length");
  EXPECT_EQ(r["full"].tokens.size(), 4u);
  EXPECT_EQ(r["length"].reason, "length");
  EXPECT_EQ(r["length"].tokens.size(), 7u);
  EXPECT_EQ(r["prompt only"].reason, "length");
  EXPECT_TRUE(r["prompt only"].tokens.empty());
  EXPECT_EQ(r["prompt only"].prompt_logprobs.size(), 1u);
  EXPECT_EQ(r["cancelled"].reason, "cancelled");
  EXPECT_EQ(r["cancelled"].tokens.size(), 2u);

  // A stop string: the text of the third token greedy decoding gives ends the request there.
  const std::vector<TokenId>& greedy = r["length"].tokens;
  GenerationRequest q = request({5, 6}, 7, 1, 0);
  q.stop = {tok.decode(std::vector<TokenId>(greedy.begin(), greedy.begin() + 3))};
  Result stopped;
  engine.submit(q, std::make_shared<Recorder>(stopped));
  while (engine.pending() > 0)
    engine.step();
  EXPECT_EQ(stopped.reason, "stop");
  EXPECT_EQ(stopped.tokens, std::vector<TokenId>(greedy.begin(), greedy.begin() + 3));

  // The end of document: the most likely token banned by making it the eod of a tokenizer.
  NullTokenizer eod_is_next(greedy.front() + 1);
  Engine ends(*cached, eod_is_next, greedy.front() + 1, 2);
  Result eod;
  ends.submit(request({5, 6}, 7, 1, 0), std::make_shared<Recorder>(eod));
  while (ends.pending() > 0)
    ends.step();
  EXPECT_TRUE(eod.tokens.empty());
  EXPECT_EQ(eod.reason, "eod");

  EXPECT_THROW(engine.submit(request({}, 3, 1, 0), std::make_shared<Recorder>(stopped)), Error);
  EXPECT_THROW(engine.submit(request(std::vector<TokenId>(kSeq + 1, 1), 3, 1, 0),
                             std::make_shared<Recorder>(stopped)),
               Error);
}

}  // namespace
}  // namespace megatron::inference
