// The MoE router's arithmetic: gradients of every score function, the load-balancing losses and
// the z-loss against fp64 central differences (away from top-k ties), and capacity dropping and
// padding on hand-made routings.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "megatron/error.h"
#include "megatron/nn/moe/routing.h"

namespace megatron::nn::moe {
namespace {

constexpr std::int64_t kTokens = 6, kExperts = 8;

// Logits whose values within a row are at least 0.05 apart, so a 1e-6 step never changes a
// top-k choice.
std::vector<double> separated_logits(std::uint32_t seed, std::int64_t tokens = kTokens,
                                     std::int64_t experts = kExperts) {
  std::mt19937 gen(seed);
  std::vector<double> out;
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<double> row;
    for (std::int64_t e = 0; e < experts; ++e)
      row.push_back(0.1 * static_cast<double>(e) + 0.05 * static_cast<double>(gen() % 3) / 3.0);
    std::shuffle(row.begin(), row.end(), gen);
    for (double v : row)
      out.push_back(v * 4.0 - 1.5);
  }
  return out;
}

// Central differences of f at x against the analytic gradient.
void expect_gradient(const std::function<double(const std::vector<double>&)>& f,
                     std::vector<double> x, const std::vector<double>& analytic) {
  constexpr double h = 1e-6;
  ASSERT_EQ(x.size(), analytic.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 1e-7 + 1e-6 * std::abs(numeric)) << "logit " << i;
  }
}

std::vector<double> weights(std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> w(kTokens * kExperts);
  for (double& v : w)
    v = normal(gen);
  return w;
}

// sum(w * probs) through route(), differentiated by route_backward.
void check_route_gradient(const RoutingConfig& c, const std::vector<double>* bias = nullptr,
                          std::uint32_t seed = 7) {
  const std::vector<double> logits = separated_logits(seed), w = weights(seed + 1);
  auto f = [&](const std::vector<double>& x) {
    const Routing r = route(c, x.data(), kTokens, bias ? bias->data() : nullptr);
    double s = 0;
    for (std::size_t i = 0; i < w.size(); ++i)
      s += w[i] * r.probs[i];
    return s;
  };
  const Routing r = route(c, logits.data(), kTokens, bias ? bias->data() : nullptr);
  std::vector<double> grad(logits.size(), 0.0);
  route_backward(c, r, w.data(), grad.data());
  expect_gradient(f, logits, grad);
  // Every token goes to exactly topk experts.
  for (std::int64_t t = 0; t < kTokens; ++t) {
    int routed = 0;
    for (std::int64_t e = 0; e < kExperts; ++e)
      routed += r.map[static_cast<std::size_t>(t * kExperts + e)];
    EXPECT_EQ(routed, c.topk);
  }
}

RoutingConfig config(std::int64_t topk = 2) {
  RoutingConfig c;
  c.num_experts = kExperts;
  c.topk = topk;
  return c;
}

TEST(MoeRouting, SoftmaxAfterTopkGradients) {
  check_route_gradient(config());
  RoutingConfig scaled = config(3);
  scaled.scaling_factor = 2.5;
  check_route_gradient(scaled);
}

TEST(MoeRouting, SoftmaxBeforeTopkGradients) {
  RoutingConfig c = config();
  c.pre_softmax = true;
  check_route_gradient(c);
}

TEST(MoeRouting, SigmoidWithExpertBiasGradients) {
  RoutingConfig c = config();
  c.score = ScoreFunction::sigmoid;
  const std::vector<double> bias = {0.3, -0.2, 0.0, 0.5, -0.4, 0.1, 0.2, -0.1};
  check_route_gradient(c, &bias);
  check_route_gradient(config(1));
  RoutingConfig single = c;
  single.topk = 1;
  check_route_gradient(single, &bias);
}

TEST(MoeRouting, GroupLimitedRoutingPicksWithinTheBestGroups) {
  RoutingConfig c = config(2);
  c.num_groups = 4;
  c.group_topk = 2;
  check_route_gradient(c);
  // One group of four pairs, scored by the sum of its two experts (topk / group_topk = 2):
  // {2, 3} (3.0) wins, so expert 0 (2.8), the second largest, is not chosen.
  RoutingConfig one_group = config(2);
  one_group.num_groups = 4;
  one_group.group_topk = 1;
  const std::vector<double> row = {2.8, -3.0, 3.0, 0.0, -2.0, -2.0, 2.5, 0.1};
  const Routing r = route(one_group, row.data(), 1);
  EXPECT_EQ(r.map, (std::vector<std::uint8_t>{0, 0, 1, 1, 0, 0, 0, 0}));
}

TEST(MoeRouting, ExpertBiasChangesTheChoiceNotTheWeights) {
  RoutingConfig c = config(1);
  c.score = ScoreFunction::sigmoid;
  const std::vector<double> row = {1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  const std::vector<double> bias = {0.0, 0.2, 0, 0, 0, 0, 0, 0};
  const Routing r = route(c, row.data(), 1, bias.data());
  EXPECT_EQ(r.map[1], 1);
  EXPECT_DOUBLE_EQ(r.probs[1], 1.0 / (1.0 + std::exp(-0.5)));  // sigmoid(logit), no bias
  std::vector<float> b = {0, 0, 0, 0.5f};
  update_expert_bias(b, {4, 1, 2, 1}, 0.01);  // mean 2
  EXPECT_EQ(b, (std::vector<float>{-0.01f, 0.01f, 0.0f, 0.5f + 0.01f}));
}

TEST(MoeRouting, LoadBalancingLossesAndZLossGradients) {
  for (const ScoreFunction score : {ScoreFunction::softmax, ScoreFunction::sigmoid}) {
    for (const std::int64_t groups : {1, 2}) {  // aux_loss, and seq_aux_loss with B = 2
      RoutingConfig c = config();
      c.score = score;
      const std::vector<double> logits = separated_logits(11);
      const std::vector<double> counts = aux_tokens_per_expert(c, logits.data(), kTokens, groups);
      const double n = static_cast<double>(kTokens / groups), coeff = 0.01, scale = 3.0;
      auto f = [&](const std::vector<double>& x) {
        return scale *
               load_balancing_loss(c, x.data(), kTokens, groups, counts, n, coeff, 0, nullptr);
      };
      std::vector<double> grad(logits.size(), 0.0);
      load_balancing_loss(c, logits.data(), kTokens, groups, counts, n, coeff, scale, grad.data());
      expect_gradient(f, logits, grad);
    }
  }
  const std::vector<double> logits = separated_logits(13);
  auto z = [&](const std::vector<double>& x) {
    return 0.5 * z_loss(x.data(), kTokens, kExperts, 1e-3, 0, nullptr);
  };
  std::vector<double> grad(logits.size(), 0.0);
  z_loss(logits.data(), kTokens, kExperts, 1e-3, 0.5, grad.data());
  expect_gradient(z, logits, grad);
}

TEST(MoeRouting, BalancedRoutingGivesTheCoefficientAndZLossIsTheMeanSquaredLogSumExp) {
  // 4 tokens over 4 experts, top-1, each token strongly preferring a different expert: every
  // expert takes 1 token; the switch loss is coeff * E / (k T^2) * sum_e P_e * 1 with
  // sum_e P_e = T, i.e. coeff * E / T = coeff.
  RoutingConfig c;
  c.num_experts = 4;
  c.topk = 1;
  std::vector<double> logits(16, 0.0);
  for (int t = 0; t < 4; ++t)
    logits[static_cast<std::size_t>(t * 4 + t)] = 5.0;
  const std::vector<double> counts = aux_tokens_per_expert(c, logits.data(), 4, 1);
  EXPECT_EQ(counts, (std::vector<double>{1, 1, 1, 1}));
  EXPECT_NEAR(load_balancing_loss(c, logits.data(), 4, 1, counts, 4, 0.1, 0, nullptr), 0.1, 1e-12);
  // All on expert 0: counts (4, 0, 0, 0), loss = coeff * 4 / 16 * 4 * P_0 / 1 = coeff * P_0.
  std::vector<double> skewed(16, 0.0);
  for (int t = 0; t < 4; ++t)
    skewed[static_cast<std::size_t>(t * 4)] = 5.0;
  const double p0 = std::exp(5.0) / (std::exp(5.0) + 3.0);
  const std::vector<double> all0 = aux_tokens_per_expert(c, skewed.data(), 4, 1);
  EXPECT_NEAR(load_balancing_loss(c, skewed.data(), 4, 1, all0, 4, 0.1, 0, nullptr), 0.1 * 4 * p0,
              1e-12);
  const double lse = std::log(std::exp(5.0) + 3.0);
  EXPECT_NEAR(z_loss(skewed.data(), 4, 4, 0.001, 0, nullptr), 0.001 * lse * lse, 1e-12);
}

// 5 tokens, 2 experts, top-1: capacity = ceil(5 * 1 / 2 * 1.0) = 3.
Routing everyone_on_expert_0(const RoutingConfig& c) {
  const std::vector<double> logits = {2.0, 0.0, 3.0, 0.0, 1.0, 0.0, 4.0, 0.0, 2.5, 0.0};
  return route(c, logits.data(), 5);
}

TEST(MoeRouting, CapacityDropsByProbabilityOrByPosition) {
  RoutingConfig c;
  c.num_experts = 2;
  c.topk = 1;
  c.score = ScoreFunction::sigmoid;  // top-1 sigmoid weights differ per token
  EXPECT_EQ(expert_capacity(5, 1, 2, 1.0), 3);
  Routing by_probs = everyone_on_expert_0(c);
  drop_over_capacity(by_probs, 1, 1.0, DropPolicy::probs, false);
  // Tokens 3 (logit 4), 1 (3) and 4 (2.5) stay on expert 0; tokens 0 and 2 are dropped.
  EXPECT_EQ(by_probs.map, (std::vector<std::uint8_t>{0, 0, 1, 0, 0, 0, 1, 0, 1, 0}));
  EXPECT_EQ(by_probs.probs[0], 0.0);
  Routing by_position = everyone_on_expert_0(c);
  drop_over_capacity(by_position, 1, 1.0, DropPolicy::position, false);
  EXPECT_EQ(by_position.map, (std::vector<std::uint8_t>{1, 0, 1, 0, 1, 0, 0, 0, 0, 0}));
  // A dropped pair carries no gradient.
  std::vector<double> dprobs(10, 1.0), grad(10, 0.0);
  route_backward(c, by_position, dprobs.data(), grad.data());
  EXPECT_EQ(grad[6], 0.0);
  EXPECT_NE(grad[0], 0.0);
}

TEST(MoeRouting, PaddingToCapacityFillsEveryExpertWithZeroWeightTokens) {
  RoutingConfig c;
  c.num_experts = 2;
  c.topk = 1;
  c.score = ScoreFunction::sigmoid;
  Routing r = everyone_on_expert_0(c);
  drop_over_capacity(r, 1, 1.0, DropPolicy::position, true);
  // Expert 0: its first three tokens; expert 1: three padding tokens (0, 1, 2) of weight 0.
  EXPECT_EQ(r.map, (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(r.probs[1], 0.0);
  EXPECT_EQ(r.probs[3], 0.0);
  EXPECT_GT(r.probs[0], 0.0);
  // A capacity above the token count keeps everything (and pads every pair).
  Routing wide = everyone_on_expert_0(c);
  drop_over_capacity(wide, 1, 4.0, DropPolicy::probs, false);
  EXPECT_EQ(wide.map, everyone_on_expert_0(c).map);
}

TEST(MoeRouting, RefusesTopkAboveTheExpertCount) {
  RoutingConfig c = config(9);
  const std::vector<double> logits = separated_logits(1);
  EXPECT_THROW(route(c, logits.data(), kTokens), Error);
  RoutingConfig groups = config(2);
  groups.num_groups = 3;
  groups.group_topk = 1;
  EXPECT_THROW(route(groups, logits.data(), kTokens), Error);
}

}  // namespace
}  // namespace megatron::nn::moe
