// Megatron's train/valid/test sample counts from the [training] schedule and the global batch.
#include <gtest/gtest.h>

#include "megatron/error.h"
#include "megatron/train/batch_schedule.h"
#include "megatron/train/sample_counts.h"

namespace megatron::train {
namespace {

using Counts = std::array<std::int64_t, 3>;

config::TrainingConfig schedule(std::int64_t eval_interval, std::int64_t eval_iters) {
  config::TrainingConfig t;
  t.eval_interval = eval_interval;
  t.eval_iters = eval_iters;
  return t;
}

TEST(SampleCounts, IterationBasedTraining) {
  config::TrainingConfig t = schedule(10, 5);
  t.train_iters = 100;
  // train 100 x 8; valid (100 // 10 + 1) x 5 x 8; test 5 x 8.
  EXPECT_EQ(train_valid_test_num_samples(t, 8), (Counts{800, 440, 40}));
  EXPECT_EQ(train_iterations(t, 8), 100);
  t.train_iters = 95;  // floor division: 9 evaluations during training, one at the end
  EXPECT_EQ(train_valid_test_num_samples(t, 8), (Counts{760, 400, 40}));
  t.eval_iters = 0;
  EXPECT_EQ(train_valid_test_num_samples(t, 8), (Counts{760, 0, 0}));
}

TEST(SampleCounts, SampleBasedTrainingDerivesTheIterations) {
  config::TrainingConfig t = schedule(10, 5);
  t.train_samples = 1003;
  EXPECT_EQ(train_iterations(t, 8), 125);  // the partial last batch is dropped
  // train is train_samples itself; valid uses the derived 125 iterations.
  EXPECT_EQ(train_valid_test_num_samples(t, 8), (Counts{1003, 520, 40}));
}

TEST(SampleCounts, RampUpCountsTheRampsIterations) {
  config::TrainingConfig t = schedule(10, 5);
  t.micro_batch_size = 1;
  t.global_batch_size = 8;
  t.train_samples = 1000;
  t.rampup_batch_size = {4, 4, 100};
  // Batches of 4 while consumed < 100 (25 iterations), one of 8 at 100, then (1000 - 108) // 8.
  EXPECT_EQ(train_iterations(t, 8), 25 + 1 + 111);
  EXPECT_EQ(train_iterations(t, 8), update_train_iters(t, BatchSchedule::from_config(t, 2)));
  EXPECT_EQ(train_valid_test_num_samples(t, 8), (Counts{1000, (137 / 10 + 1) * 5 * 8, 40}));
}

TEST(SampleCounts, NoLengthIsAConfigError) {
  EXPECT_THROW(train_valid_test_num_samples(schedule(10, 5), 8), ConfigError);
  config::TrainingConfig t = schedule(10, 5);
  t.train_iters = 10;
  EXPECT_THROW(train_valid_test_num_samples(t, 0), Error);
}

}  // namespace
}  // namespace megatron::train
