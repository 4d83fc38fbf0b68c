// Blending by hand-worked examples: normalisation order, constituent requests, the greedy order
// with its tie rule, exhaustive blends and refusals (random blends are compared with a Python
// reference in megatron_reference.py).
#include <gtest/gtest.h>

#include <vector>

#include "expect_error.h"
#include "megatron/data/blend.h"

namespace megatron::data {
namespace {

TEST(Blend, NormalisationSumsInNumpysOrder) {
  // numpy sums [0.7, 0.2, 0.1] left to right to 0.9999999999999999, not 1.
  const std::vector<double> weights = {0.7, 0.2, 0.1};
  const double numpy_sum = (0.7 + 0.2) + 0.1;
  ASSERT_NE(numpy_sum, 1.0);
  const auto normalized = normalize_weights(weights);
  EXPECT_EQ(normalized[0], 0.7 / numpy_sum);
  EXPECT_EQ(normalized[2], 0.1 / numpy_sum);
  EXPECT_ERROR_MENTIONING(normalize_weights(std::vector<double>{1.0, -1.0}), "weight 1");
  EXPECT_ERROR_MENTIONING(normalize_weights(std::vector<double>{0.0, 0.0}), "sum to zero");
}

TEST(Blend, ConstituentsAreAskedForTheirShareWithSurplus) {
  // ceil(ceil(1000 * 0.25) * 1.005) = ceil(251.25) = 252; ceil(753.75) = 754.
  EXPECT_EQ(constituent_sample_requests(std::vector<double>{0.25, 0.75}, 1000),
            (std::vector<std::int64_t>{252, 754}));
  EXPECT_EQ(constituent_sample_requests(std::vector<double>{0.25, 0.75}, 1000, 0.0),
            (std::vector<std::int64_t>{250, 750}));
}

TEST(Blend, GreedyOrderBreaksTiesTowardsTheLowestIndex) {
  // t=0: errors 0.5, 0.5 -> 0. t=1: -0.5, 0.5 -> 1. t=2: 0, 0 -> 0. t=3: -0.5, 0.5 -> 1.
  const BlendIndices blend = build_blending_indices(std::vector<double>{0.5, 0.5}, 4);
  EXPECT_EQ(blend.dataset_index, (std::vector<std::int16_t>{0, 1, 0, 1}));
  EXPECT_EQ(blend.dataset_sample_index, (std::vector<std::int64_t>{0, 0, 1, 1}));
}

TEST(Blend, ExhaustiveBlendUsesEverySampleOnce) {
  // Weights 1/3, 2/3. t=0: 1/3 vs 2/3 -> 1. t=1: 1/3 vs -1/3 -> 0 (now spent). t=2: only 1.
  const BlendIndices blend = build_exhaustive_blending_indices(std::vector<std::int64_t>{1, 2});
  EXPECT_EQ(blend.dataset_index, (std::vector<std::int16_t>{1, 0, 1}));
  EXPECT_EQ(blend.dataset_sample_index, (std::vector<std::int64_t>{0, 0, 1}));
}

TEST(Blend, WeightedBlendSizeIsTheSumOfShares) {
  BlendRequest request;
  request.weights = std::vector<double>{1.0, 3.0};
  request.size = 10;
  const auto plan = plan_constituent_samples(request, 2);
  // Shares ceil(2.5) = 3 and ceil(7.5) = 8, so 11 samples; requests ceil(3.015), ceil(8.04).
  EXPECT_EQ(plan, (std::vector<std::optional<std::int64_t>>{4, 9}));
  const Blend blend = build_blend(request, std::vector<std::int64_t>{4, 9});
  EXPECT_EQ(blend.size, 11);
  EXPECT_EQ(blend.indices.dataset_index.size(), 11u);
  EXPECT_FALSE(blend.weights_are_lengths);
}

TEST(Blend, WithoutWeightsTheLengthsWeighAndCapTheSize) {
  BlendRequest request;
  request.size = 1000;
  EXPECT_EQ(plan_constituent_samples(request, 2),
            (std::vector<std::optional<std::int64_t>>{std::nullopt, std::nullopt}));
  const Blend capped = build_blend(request, std::vector<std::int64_t>{10, 30});
  EXPECT_EQ(capped.size, 40);
  EXPECT_EQ(capped.weights, (std::vector<double>{0.25, 0.75}));
  request.size.reset();
  const Blend exhaustive = build_blend(request, std::vector<std::int64_t>{10, 30});
  EXPECT_FALSE(exhaustive.size);
  EXPECT_TRUE(exhaustive.weights_are_lengths);
  EXPECT_EQ(exhaustive.indices.dataset_index.size(), 40u);
}

TEST(Blend, RefusesWhatMegatronCannotBuild) {
  BlendRequest request;
  request.weights = std::vector<double>{0.3, 0.7};
  EXPECT_ERROR_MENTIONING(plan_constituent_samples(request, 2), "need a requested number");
  request.size = 1000;
  EXPECT_ERROR_MENTIONING(build_blend(request, std::vector<std::int64_t>{200, 800}),
                          "samples from dataset 0, which has only 200");
  EXPECT_ERROR_MENTIONING(build_blend(request, std::vector<std::int64_t>{400, 0}),
                          "dataset 1 of the blend has 0 samples");
  request.weights = std::vector<double>{1.0, 0.0};
  EXPECT_ERROR_MENTIONING(build_blend(request, std::vector<std::int64_t>{2000, 10}),
                          "weight of dataset 1 is zero");
  EXPECT_ERROR_MENTIONING(plan_constituent_samples(request, 3), "3 datasets but 2 weights");
}

TEST(Blend, SingleUnweightedDatasetsSkipTheBlendLayer) {
  EXPECT_FALSE(needs_blend_layer(1, false, false));
  EXPECT_TRUE(needs_blend_layer(1, true, false));
  EXPECT_FALSE(needs_blend_layer(1, true, true));
  EXPECT_TRUE(needs_blend_layer(2, false, true));
}

}  // namespace
}  // namespace megatron::data
