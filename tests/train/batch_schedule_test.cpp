// Micro-batch counts, batch-size ramp-up and update_train_iters, against counts worked out by hand
// (and checked with a python3 transcription of Megatron's loop).
#include <gtest/gtest.h>

#include "megatron/config/core_config.h"
#include "megatron/error.h"
#include "megatron/train/batch_schedule.h"

namespace megatron::train {
namespace {

template <typename Fn>
std::string config_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return {};
}

TEST(BatchSchedule, ConstantSplitsTheGlobalBatch) {
  const BatchSchedule b(32, 2, 4);  // 32 / (2 x 4) = 4 micro-batches
  EXPECT_FALSE(b.has_rampup());
  EXPECT_EQ(b.at(0), (BatchSizes{32, 32, 4}));
  EXPECT_EQ(b.at(1'000'000), (BatchSizes{32, 32, 4}));
}

TEST(BatchSchedule, ConstantRefusesAnIndivisibleBatch) {
  const auto e = config_error_of([] { BatchSchedule(30, 2, 4); });
  EXPECT_NE(e.find("training.global_batch_size (30) is not divisible by micro_batch_size (2) "
                   "times the data-parallel size (4)"),
            std::string::npos)
      << e;
  EXPECT_NE(config_error_of([] { BatchSchedule(4, 2, 4); }).find("not divisible"),
            std::string::npos);
}

TEST(BatchSchedule, DecreaseIfNeededRoundsDown) {
  const BatchSchedule b(30, 2, 4, /*decrease_batch_size_if_needed=*/true);
  EXPECT_EQ(b.at(0), (BatchSizes{30, 24, 3}));
  EXPECT_NE(config_error_of([] { BatchSchedule(6, 2, 4, true); }).find("gives no micro-batch"),
            std::string::npos);
}

TEST(BatchSchedule, RampupGrowsAtEvenlySpacedThresholds) {
  // [16, 8, 1000] up to 48: 4 increments, one every 1000 / 4 = 250 samples; mbs 2 x dp 2 = 4.
  const auto b = BatchSchedule::rampup(16, 8, 1000, 48, 2, 2);
  EXPECT_TRUE(b.has_rampup());
  struct Case {
    std::int64_t consumed, global, micro;
  };
  const Case cases[] = {{0, 16, 4},     {249, 16, 4},    {250, 24, 6},  {499, 24, 6},
                        {500, 32, 8},   {750, 40, 10},   {999, 40, 10}, {1000, 48, 12},
                        {1001, 48, 12}, {50'000, 48, 12}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.consumed);
    EXPECT_EQ(b.global_batch_size_at(c.consumed), c.global);
    EXPECT_EQ(b.num_micro_batches_at(c.consumed), c.micro);
  }
}

TEST(BatchSchedule, RampupWithAFractionalSpacing) {
  // [8, 8, 100] up to 32: 3 increments every 100 / 3 = 33.33 samples: int(c / 33.33).
  const auto b = BatchSchedule::rampup(8, 8, 100, 32, 8, 1);
  EXPECT_EQ(b.global_batch_size_at(33), 8);
  EXPECT_EQ(b.global_batch_size_at(34), 16);
  EXPECT_EQ(b.global_batch_size_at(66), 16);
  EXPECT_EQ(b.global_batch_size_at(67), 24);
  EXPECT_EQ(b.global_batch_size_at(100), 32);
  EXPECT_EQ(b.global_batch_size_at(101), 32);
}

TEST(BatchSchedule, RampupConsistencyCheck) {
  // [16, 4, 100] up to 32 with mbs 8: after 25 samples the batch is 20, not a multiple of 8.
  const auto b = BatchSchedule::rampup(16, 4, 100, 32, 8, 1);
  EXPECT_EQ(b.at(0).num_micro_batches, 2);
  EXPECT_EQ(b.at(25, /*consistency_check=*/false).global_batch_size, 20);
  const auto e = config_error_of([&] { b.at(25); });
  EXPECT_NE(e.find("global batch size after 25 samples (20) is not divisible by "
                   "micro_batch_size (8) times the data-parallel size (1)"),
            std::string::npos)
      << e;
}

TEST(BatchSchedule, RampupRefusals) {
  auto msg = [](std::int64_t start, std::int64_t inc, std::int64_t samples, std::int64_t global) {
    return config_error_of([&] { BatchSchedule::rampup(start, inc, samples, global, 1, 1); });
  };
  EXPECT_NE(msg(64, 8, 100, 32).find("start batch size is larger than global_batch_size (32)"),
            std::string::npos);
  EXPECT_NE(msg(16, 5, 100, 32).find("minus the start (16) must be a multiple of the increment"),
            std::string::npos);
  EXPECT_NE(msg(32, 8, 100, 32).find("nothing to ramp up"), std::string::npos);
  EXPECT_NE(msg(16, 0, 100, 32).find("increment must be positive"), std::string::npos);
  EXPECT_NE(msg(0, 8, 100, 32).find("start batch size must be positive"), std::string::npos);
  EXPECT_NE(msg(16, 8, 0, 32)
                .find("training.rampup_batch_size [16, 8, 0]: the ramp-up needs a "
                      "positive number of samples"),
            std::string::npos);
}

TEST(BatchSchedule, FromConfig) {
  config::TrainingConfig t;
  t.micro_batch_size = 2;
  EXPECT_EQ(resolve_global_batch_size(t, 4), 8);  // Megatron's default mbs x dp
  EXPECT_EQ(BatchSchedule::from_config(t, 4).at(0), (BatchSizes{8, 8, 1}));
  t.global_batch_size = 48;
  t.rampup_batch_size = {16, 8, 1000};
  const auto b = BatchSchedule::from_config(t, 2);
  EXPECT_TRUE(b.has_rampup());
  EXPECT_EQ(b.global_batch_size_at(500), 32);
  EXPECT_EQ(b.num_micro_batches_at(500), 8);
}

TEST(UpdateTrainIters, IterationBasedIsGivenTrainIters) {
  config::TrainingConfig t;
  t.train_iters = 123;
  EXPECT_EQ(update_train_iters(t, BatchSchedule(8, 1, 1)), 123);
}

TEST(UpdateTrainIters, ConstantBatchDropsThePartialBatch) {
  config::TrainingConfig t;
  t.train_samples = 1000;
  EXPECT_EQ(update_train_iters(t, BatchSchedule(48, 1, 1)), 20);  // 1000 // 48
}

TEST(UpdateTrainIters, RampupCountsEveryRampIteration) {
  // [16, 8, 1000] up to 48 over 10000 samples. Ramp (consumed <= 1000 before the step):
  //   16 x 16 (0..240 -> 256), 11 x 24 (256..496 -> 520), 8 x 32 (520..744 -> 776),
  //   6 x 40 (776..976 -> 1016): 41 iterations, 1016 consumed; then (10000 - 1016) // 48 = 187.
  config::TrainingConfig t;
  t.train_samples = 10000;
  EXPECT_EQ(update_train_iters(t, BatchSchedule::rampup(16, 8, 1000, 48, 2, 2)), 228);
}

TEST(UpdateTrainIters, RampupLongerThanTrainingFloorsLikePython) {
  // [8, 8, 100] up to 32: the batch is 8 up to 33 samples, 16 up to 66, 24 up to 99, then 32.
  // Ramp: 0, 8, 16, 24, 32 (8 each) -> 40; 40, 56 (16) -> 72; 72, 96 (24) -> 120: 9 iterations,
  // 120 consumed. With 50 training samples: 9 + (50 - 120) // 32 = 9 + (-3) = 6 (floor division).
  config::TrainingConfig t;
  t.train_samples = 50;
  const auto b = BatchSchedule::rampup(8, 8, 100, 32, 8, 1);
  EXPECT_EQ(update_train_iters(t, b), 6);
  t.train_samples = 1000;
  EXPECT_EQ(update_train_iters(t, b), 36);  // 9 + 880 // 32
}

TEST(UpdateTrainIters, NeedsALength) {
  config::TrainingConfig t;
  EXPECT_NE(config_error_of([&] {
              update_train_iters(t, BatchSchedule(8, 1, 1));
            }).find("training.train_iters / training.train_samples"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron::train
