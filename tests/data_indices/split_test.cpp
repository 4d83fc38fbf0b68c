// Split strings, book-ends, element ranges and per-split sample counts, by hand-worked examples
// (every split string is also compared with Python and numpy in megatron_reference.py).
#include <gtest/gtest.h>

#include "expect_error.h"
#include "megatron/data/split.h"

namespace megatron::data {
namespace {

TEST(Split, WeightsAreNormalisedAndPaddedToThree) {
  const auto weights = parse_split("949,50,1");
  EXPECT_EQ(weights[0], 949.0 / 1000.0);
  EXPECT_EQ(weights[1], 50.0 / 1000.0);
  EXPECT_EQ(weights[2], 1.0 / 1000.0);
  const auto padded = parse_split("99, 1");
  EXPECT_EQ(padded[0], 0.99);
  EXPECT_EQ(padded[2], 0.0);
  // Every run of digits and dots is a number; anything else separates them.
  EXPECT_EQ(parse_split("3/1"), parse_split("3,1,0"));
  EXPECT_EQ(parse_split(kDefaultSplit), parse_split("969,30,1"));
}

TEST(Split, BadSplitsAreRefused) {
  EXPECT_ERROR_MENTIONING(parse_split("1,2,3,4"), "'1,2,3,4' has 4 weights", "at most 3");
  EXPECT_ERROR_MENTIONING(parse_split("0,0,0"), "'0,0,0'", "zero weight");
  EXPECT_ERROR_MENTIONING(parse_split(""), "zero weight");
  EXPECT_ERROR_MENTIONING(parse_split("90,1.2.3"), "'1.2.3' at character 4 is not a number");
}

TEST(Split, MatrixHoldsCumulativeBookendsAndDropsEmptySplits) {
  const SplitMatrix matrix = split_matrix(parse_split("949,50,1"));
  ASSERT_TRUE(matrix[0] && matrix[1] && matrix[2]);
  EXPECT_EQ(*matrix[0], (SplitBookends{0.0, 0.949}));
  EXPECT_EQ(matrix[1]->begin, 0.949);
  EXPECT_EQ(matrix[1]->end, 0.949 + 0.05);
  EXPECT_EQ(matrix[2]->end, 0.949 + 0.05 + 0.001);

  const SplitMatrix no_train = split_matrix(parse_split("0,1"));
  EXPECT_FALSE(no_train[0]);
  EXPECT_EQ(*no_train[1], (SplitBookends{0.0, 1.0}));
  EXPECT_FALSE(no_train[2]);
}

TEST(Split, ElementRangesRoundHalfToEven) {
  // 0.5 * 5 = 2.5 rounds to 2; 0.5 * 7 = 3.5 rounds to 4 (Python's round, not half-up).
  EXPECT_EQ(split_element_range({0.0, 0.5}, 5), (ElementRange{0, 2}));
  EXPECT_EQ(split_element_range({0.5, 1.0}, 5), (ElementRange{2, 5}));
  EXPECT_EQ(split_element_range({0.0, 0.5}, 7), (ElementRange{0, 4}));
  const SplitMatrix matrix = split_matrix(parse_split("949,50,1"));
  EXPECT_EQ(split_element_range(*matrix[0], 1000), (ElementRange{0, 949}));
  EXPECT_EQ(split_element_range(*matrix[1], 1000), (ElementRange{949, 999}));
  EXPECT_EQ(split_element_range(*matrix[2], 1000), (ElementRange{999, 1000}));
  EXPECT_EQ(split_element_range(*matrix[2], 1000).size(), 1);
}

TEST(Split, SamplesPerSplitFollowTheTrainingSchedule) {
  SampleSchedule schedule;
  schedule.train_iters = 100;
  schedule.global_batch_size = 8;
  schedule.eval_interval = 10;
  schedule.eval_iters = 2;
  EXPECT_EQ(samples_per_split(schedule), (std::array<std::int64_t, 3>{800, 176, 16}));
  schedule.train_samples = 777;
  EXPECT_EQ(samples_per_split(schedule)[0], 777);
  schedule.eval_interval = 0;
  EXPECT_ERROR_MENTIONING(samples_per_split(schedule), "eval interval 0");
}

TEST(Split, NamesAreMegatrons) {
  EXPECT_EQ(split_name(Split::kTrain), "train");
  EXPECT_EQ(split_name(Split::kValid), "valid");
  EXPECT_EQ(split_name(Split::kTest), "test");
}

}  // namespace
}  // namespace megatron::data
