// Token sampling against hand-worked cases of Megatron's rules: greedy's first argmax, top-k's
// ties at the k-th logit, top-p's shifted cut, temperature, the draw over the filtered
// distribution, padded-vocabulary ids never produced, the parameter checks and top-p decay.
#include "megatron/inference/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace megatron::inference {
namespace {

// Every token the parameters can produce, over a fine grid of uniforms.
std::set<std::int32_t> reachable(const std::vector<float>& logits, std::int64_t vocab,
                                 const SamplingParams& p) {
  std::set<std::int32_t> out;
  for (int i = 0; i < 1000; ++i)
    out.insert(sample_token(logits, vocab, p, (i + 0.5) / 1000));
  return out;
}

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (const double q : probs)
    out.push_back(static_cast<float>(std::log(q)));
  return out;
}

TEST(Sampling, GreedyIsTheFirstLargestRealLogit) {
  const std::vector<float> logits = {1, 5, 5, 2, 9};  // id 4 is padding
  SamplingParams greedy;
  greedy.top_k = 1;
  EXPECT_EQ(sample_token(logits, 4, greedy, 0.7), 1);
  EXPECT_EQ(sample_token(logits, 5, greedy, 0.7), 4);
}

TEST(Sampling, PaddedIdsNeverComeOut) {
  const std::vector<float> logits = {0, 0.5f, 1, 50, 60};  // ids 3 and 4 are padding
  EXPECT_EQ(reachable(logits, 3, {}), (std::set<std::int32_t>{0, 1, 2}));
}

TEST(Sampling, TopKKeepsTiesWithTheKthLogit) {
  const std::vector<float> logits = {3, 2, 2, 1, 0};
  SamplingParams p;
  p.top_k = 2;
  EXPECT_EQ(reachable(logits, 5, p), (std::set<std::int32_t>{0, 1, 2}));
  p.top_k = 4;
  EXPECT_EQ(reachable(logits, 5, p), (std::set<std::int32_t>{0, 1, 2, 3}));
}

TEST(Sampling, TopPCutsAfterTheCumulativeProbabilityPassesIt) {
  // Probabilities 0.2, 0.5, 0.3 (ids 0, 1, 2): sorted 0.5 (id 1), 0.3 (id 2), 0.2 (id 0). A
  // candidate goes when the probability before it exceeds top_p.
  const std::vector<float> logits = log_of({0.2, 0.5, 0.3});
  SamplingParams p;
  p.top_p = 0.4;  // before id 2: 0.5 > 0.4
  EXPECT_EQ(reachable(logits, 3, p), (std::set<std::int32_t>{1}));
  p.top_p = 0.55;  // before id 2: 0.5, kept; before id 0: 0.8
  EXPECT_EQ(reachable(logits, 3, p), (std::set<std::int32_t>{1, 2}));
  p.top_p = 0.85;
  EXPECT_EQ(reachable(logits, 3, p), (std::set<std::int32_t>{0, 1, 2}));
}

TEST(Sampling, DrawsFromTheRenormalisedDistributionInFallingOrder) {
  // Kept 0.5 and 0.3 renormalise to 5/8 and 3/8: uniforms below 5/8 give id 1, above id 2.
  const std::vector<float> logits = log_of({0.2, 0.5, 0.3});
  SamplingParams p;
  p.top_p = 0.55;
  EXPECT_EQ(sample_token(logits, 3, p, 0.0), 1);
  EXPECT_EQ(sample_token(logits, 3, p, 0.62), 1);
  EXPECT_EQ(sample_token(logits, 3, p, 0.63), 2);
  EXPECT_EQ(sample_token(logits, 3, p, 0.999999), 2);
  // Temperature 2 turns probabilities 1/5 and 4/5 into 1/3 and 2/3.
  const std::vector<float> two = log_of({0.2, 0.8});
  SamplingParams warm;
  warm.temperature = 2.0;
  int ones = 0;
  for (int i = 0; i < 3000; ++i)
    ones += sample_token(two, 2, warm, (i + 0.5) / 3000) == 1;
  EXPECT_EQ(ones, 2000);
}

TEST(Sampling, RefusesParametersAsMegatronsServer) {
  auto error = [](SamplingParams p) { return sampling_error(p, 50257); };
  SamplingParams p;
  EXPECT_EQ(error(p), "");
  p.temperature = 0;
  EXPECT_EQ(error(p), "temperature must be a positive number less than or equal to 100.0");
  p = {};
  p.top_k = 1001;
  EXPECT_EQ(error(p), "top_k must be equal to or greater than 0 and less than or equal to 1000");
  p = {};
  p.top_k = 5;
  EXPECT_NE(sampling_error(p, 5).find("less than the vocabulary size (5)"), std::string::npos);
  p.top_p = 0.5;
  EXPECT_EQ(error(p), "cannot set both top-k and top-p samplings.");
  p = {};
  p.top_p = 1.5;
  EXPECT_EQ(error(p), "top_p must be less than or equal to 1.0");
  p = {};
  p.top_p_decay = 0.5;
  EXPECT_EQ(error(p), "top_p_decay cannot be set without top_p");
  p.top_p = 0.9;
  p.top_p_bound = 0.95;
  EXPECT_EQ(error(p), "top_p_bound must be greater than 0 and less than top_p");
}

TEST(Sampling, TopPDecaysToItsBound) {
  SamplingParams p;
  p.top_p = 0.9;
  p.top_p_decay = 0.5;
  p.top_p_bound = 0.3;
  EXPECT_DOUBLE_EQ(decayed_top_p(p, 0.9), 0.45);
  EXPECT_DOUBLE_EQ(decayed_top_p(p, 0.45), 0.3);
  SamplingParams no_decay;
  no_decay.top_p = 0.9;
  EXPECT_DOUBLE_EQ(decayed_top_p(no_decay, 0.9), 0.9);
}

}  // namespace
}  // namespace megatron::inference
