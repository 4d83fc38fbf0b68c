// Learning-rate and weight-decay schedules against Megatron's closed forms, with the expected
// values computed apart in python3 (formula in each comment) and pasted as literals.
#include <gtest/gtest.h>

#include "megatron/config/core_config.h"
#include "megatron/error.h"
#include "megatron/train/lr_schedule.h"

namespace megatron::train {
namespace {

constexpr double kMax = 1e-3;
constexpr double kMin = 1e-5;

// Iteration-based: 100 iterations of 8 samples, 10 warm-up iterations -> warm-up 80 samples,
// decay over 800 samples.
config::TrainingConfig iteration_based(const char* style) {
  config::TrainingConfig t;
  t.train_iters = 100;
  t.lr = kMax;
  t.min_lr = kMin;
  t.lr_warmup_iters = 10;
  t.lr_decay_style = style;
  return t;
}

// Sample-based: 1000 samples, warm-up 100 samples, WSD annealing over the last 200 (from 800).
config::TrainingConfig wsd(const char* anneal) {
  config::TrainingConfig t;
  t.train_samples = 1000;
  t.lr = kMax;
  t.min_lr = kMin;
  t.lr_warmup_samples = 100;
  t.lr_decay_style = "WSD";
  t.lr_wsd_decay_samples = 200;
  t.lr_wsd_decay_style = anneal;
  return t;
}

TEST(LrSchedule, IterationBasedLengthsAreSamples) {
  const auto c = lr_schedule_config(iteration_based("linear"), 8);
  EXPECT_EQ(c.decay_steps, 800);
  EXPECT_DOUBLE_EQ(c.warmup_steps, 80.0);
  EXPECT_EQ(c.wd_incr_steps, 800);
  EXPECT_FALSE(c.wsd_decay_steps.has_value());
  auto t = iteration_based("linear");
  t.lr_decay_iters = 50;
  EXPECT_EQ(lr_schedule_config(t, 8).decay_steps, 400);
  EXPECT_EQ(lr_schedule_config(t, 8).wd_incr_steps, 800);  // always over train_iters
}

TEST(LrSchedule, LinearWarmupIncludesItsLastStep) {
  const auto s = make_optimizer_param_scheduler(iteration_based("linear"), 8);
  EXPECT_EQ(s.lr(0), 0.0);             // lr_warmup_init
  EXPECT_DOUBLE_EQ(s.lr(40), 0.0005);  // 1e-3 * 40 / 80
  EXPECT_DOUBLE_EQ(s.lr(80), kMax);    // n <= warmup: still the warm-up branch
}

TEST(LrSchedule, LinearDecay) {
  // min + (1 - (n - 80) / 720) * (max - min)
  const auto s = make_optimizer_param_scheduler(iteration_based("linear"), 8);
  EXPECT_DOUBLE_EQ(s.lr(81), 0.000998625);
  EXPECT_DOUBLE_EQ(s.lr(440), 0.000505);
  EXPECT_DOUBLE_EQ(s.lr(620), 0.0002575);
  EXPECT_DOUBLE_EQ(s.lr(800), kMin);
  EXPECT_EQ(s.lr(801), kMin);  // past the decay span
  EXPECT_EQ(s.lr(100000), kMin);
}

TEST(LrSchedule, CosineDecay) {
  // min + 0.5 * (cos(pi * (n - 80) / 720) + 1) * (max - min)
  const auto s = make_optimizer_param_scheduler(iteration_based("cosine"), 8);
  EXPECT_DOUBLE_EQ(s.lr(81), 0.0009999952879567635);
  EXPECT_DOUBLE_EQ(s.lr(260), 0.000855017856687341);
  EXPECT_DOUBLE_EQ(s.lr(440), 0.000505);
  EXPECT_DOUBLE_EQ(s.lr(620), 0.000154982143312659);
  EXPECT_DOUBLE_EQ(s.lr(800), kMin);
  EXPECT_EQ(s.lr(900), kMin);
}

TEST(LrSchedule, ConstantHoldsTheMaximumForever) {
  const auto s = make_optimizer_param_scheduler(iteration_based("constant"), 8);
  EXPECT_DOUBLE_EQ(s.lr(40), 0.0005);  // warm-up still applies
  EXPECT_EQ(s.lr(81), kMax);
  EXPECT_EQ(s.lr(800), kMax);
  EXPECT_EQ(s.lr(5000), kMax);  // even past the decay span
}

TEST(LrSchedule, InverseSquareRoot) {
  // max(min, max_lr * sqrt(max(warmup, 1)) / sqrt(max(n, 1))), warm-up 80
  const auto s = make_optimizer_param_scheduler(iteration_based("inverse-square-root"), 8);
  EXPECT_DOUBLE_EQ(s.lr(100), 0.0008944271909999159);
  EXPECT_DOUBLE_EQ(s.lr(320), 0.0005);
  EXPECT_DOUBLE_EQ(s.lr(799), 0.0003164255938535266);
  EXPECT_EQ(s.lr(801), kMin);  // past the decay span

  // Without warm-up: sqrt(1) / sqrt(max(n, 1)); n = 0 counts as 1.
  auto t = iteration_based("inverse-square-root");
  t.lr_warmup_iters = 0;
  const auto nw = make_optimizer_param_scheduler(t, 8);
  EXPECT_DOUBLE_EQ(nw.lr(0), 0.001);
  EXPECT_DOUBLE_EQ(nw.lr(1), 0.001);
  EXPECT_DOUBLE_EQ(nw.lr(4), 0.0005);
  EXPECT_DOUBLE_EQ(nw.lr(7), 0.0003779644730092272);

  // Clamped at min_lr: 1e-3 / sqrt(400) = 5e-5 < 1e-4.
  t.min_lr = 1e-4;
  EXPECT_EQ(make_optimizer_param_scheduler(t, 8).lr(400), 1e-4);
}

TEST(LrSchedule, WsdIsStableUntilTheAnnealingWindow) {
  const auto s = make_optimizer_param_scheduler(wsd("exponential"), 1);
  EXPECT_DOUBLE_EQ(s.lr(50), 0.0005);  // warm-up
  EXPECT_EQ(s.lr(101), kMax);
  EXPECT_EQ(s.lr(800), kMax);  // n <= decay - wsd: still stable
  EXPECT_EQ(s.lr(1001), kMin);
}

TEST(LrSchedule, WsdAnnealStyles) {
  // r = (n - 800) / 200 at n = 850, 900, 950 (r = 0.25, 0.5, 0.75); lr = min + c * (max - min)
  struct Case {
    const char* style;
    double at[3];
  };
  const Case cases[] = {
      // c = 1 - r
      {"linear", {0.0007525, 0.000505, 0.0002575}},
      // c = 0.5 * (cos(pi r) + 1)
      {"cosine", {0.000855017856687341, 0.000505, 0.000154982143312659}},
      // c = 2 * 0.5^r - 1
      {"exponential", {0.0006849749022023547, 0.0004200714267493642, 0.00019731504385269382}},
      // c = 1 - sqrt(r)
      {"minus_sqrt", {0.000505, 0.00029996428662531794, 0.00014263485025340578}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.style);
    const auto s = make_optimizer_param_scheduler(wsd(c.style), 1);
    EXPECT_DOUBLE_EQ(s.lr(850), c.at[0]);
    EXPECT_DOUBLE_EQ(s.lr(900), c.at[1]);
    EXPECT_DOUBLE_EQ(s.lr(950), c.at[2]);
    EXPECT_NEAR(s.lr(1000), kMin, 1e-18);  // r = 1: every curve reaches min_lr
  }
}

TEST(LrSchedule, WsdIterationBasedScalesByTheGlobalBatch) {
  config::TrainingConfig t;
  t.train_iters = 100;
  t.lr = kMax;
  t.lr_decay_style = "WSD";
  t.lr_wsd_decay_iters = 20;
  const auto c = lr_schedule_config(t, 4);
  ASSERT_TRUE(c.wsd_decay_steps.has_value());
  EXPECT_EQ(*c.wsd_decay_steps, 80);
  EXPECT_EQ(c.decay_steps, 400);
}

TEST(LrSchedule, WarmupFromAFractionStaysFractional) {
  // 0.0125 x 1000 samples = 12.5 samples of warm-up, kept as a float as Megatron does.
  config::TrainingConfig t;
  t.train_samples = 1000;
  t.lr = kMax;
  t.min_lr = kMin;
  t.lr_warmup_fraction = 0.0125;
  const auto s = make_optimizer_param_scheduler(t, 1);
  EXPECT_DOUBLE_EQ(s.config().warmup_steps, 12.5);
  EXPECT_DOUBLE_EQ(s.lr(12), 0.00096);                // 1e-3 * 12 / 12.5
  EXPECT_DOUBLE_EQ(s.lr(13), 0.0009994987341772153);  // min + (1 - 0.5 / 987.5) * (max - min)

  // Iteration-based: fraction of the decay span in samples (0.1 x 100 x 8 = 80).
  auto it = iteration_based("linear");
  it.lr_warmup_iters = 0;
  it.lr_warmup_fraction = 0.1;
  EXPECT_DOUBLE_EQ(lr_schedule_config(it, 8).warmup_steps, 80.0);
}

TEST(LrSchedule, WarmupFromSamplesAndFromInit) {
  config::TrainingConfig t;
  t.train_samples = 1000;
  t.lr = kMax;
  t.lr_warmup_samples = 100;
  t.lr_warmup_init = 1e-4;
  const auto s = make_optimizer_param_scheduler(t, 1);
  EXPECT_DOUBLE_EQ(s.config().warmup_steps, 100.0);
  EXPECT_EQ(s.lr(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr(50), 0.00055);  // 1e-4 + (1e-3 - 1e-4) * 50 / 100
  EXPECT_DOUBLE_EQ(s.lr(100), kMax);
}

TEST(LrSchedule, SampleBasedDecayDefaultsToTrainSamples) {
  config::TrainingConfig t;
  t.train_samples = 1000;
  t.lr = kMax;
  EXPECT_EQ(lr_schedule_config(t, 8).decay_steps, 1000);
  EXPECT_EQ(lr_schedule_config(t, 8).wd_incr_steps, 1000);
  t.lr_decay_samples = 600;
  EXPECT_EQ(lr_schedule_config(t, 8).decay_steps, 600);
}

TEST(LrSchedule, WeightDecayIncrement) {
  // From 0 to 0.1 over 800 samples: linear c = n / 800, cosine c = 0.5 (cos(pi (1 - n/800)) + 1)
  auto t = iteration_based("linear");
  t.weight_decay_incr_style = "linear";
  t.start_weight_decay = 0.0;
  t.end_weight_decay = 0.1;
  const auto lin = make_optimizer_param_scheduler(t, 8);
  EXPECT_EQ(lin.weight_decay(0), 0.0);
  EXPECT_DOUBLE_EQ(lin.weight_decay(200), 0.025);
  EXPECT_DOUBLE_EQ(lin.weight_decay(600), 0.07500000000000001);
  EXPECT_DOUBLE_EQ(lin.weight_decay(800), 0.1);
  EXPECT_EQ(lin.weight_decay(801), 0.1);

  t.weight_decay_incr_style = "cosine";
  const auto cos = make_optimizer_param_scheduler(t, 8);
  EXPECT_DOUBLE_EQ(cos.weight_decay(200), 0.014644660940672627);
  EXPECT_DOUBLE_EQ(cos.weight_decay(400), 0.05);
  EXPECT_DOUBLE_EQ(cos.weight_decay(600), 0.08535533905932738);

  const auto constant = make_optimizer_param_scheduler(iteration_based("linear"), 8);
  EXPECT_EQ(constant.weight_decay(0), 0.01);  // weight_decay throughout
  EXPECT_EQ(constant.weight_decay(5000), 0.01);
}

TEST(LrSchedule, StepAdvancesBySamples) {
  auto s = make_optimizer_param_scheduler(iteration_based("linear"), 8);
  EXPECT_EQ(s.current_lr(), 0.0);
  for (int i = 0; i < 5; ++i)
    s.step(8);
  EXPECT_EQ(s.num_steps(), 40);
  EXPECT_DOUBLE_EQ(s.current_lr(), 0.0005);
  s.set_num_steps(440);
  EXPECT_DOUBLE_EQ(s.current_lr(), 0.000505);
}

std::string error_of(const config::TrainingConfig& t, std::int64_t gbs = 8) {
  try {
    make_optimizer_param_scheduler(t, gbs);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return {};
}

TEST(LrSchedule, MegatronAssertsAreConfigErrors) {
  auto t = iteration_based("linear");
  t.lr_warmup_iters = 100;  // warm-up 800 samples, not shorter than decay (800)
  EXPECT_NE(error_of(t).find("must be shorter than the decay span (800 samples)"),
            std::string::npos);

  t = iteration_based("linear");
  t.lr.reset();
  EXPECT_NE(error_of(t).find("training.lr: the peak learning rate is not set"), std::string::npos);

  t = iteration_based("linear");
  t.train_iters.reset();
  EXPECT_NE(error_of(t).find("training.train_iters / training.train_samples"), std::string::npos);

  t = iteration_based("WSD");
  EXPECT_NE(error_of(t).find("\"WSD\" needs its annealing span"), std::string::npos);

  t = iteration_based("linear");
  t.min_lr = 2e-3;
  EXPECT_NE(error_of(t).find("training.min_lr (0.002) is larger than training.lr (0.001)"),
            std::string::npos);

  t = iteration_based("linear");
  t.lr_warmup_init = 2e-3;
  EXPECT_NE(error_of(t).find("training.lr_warmup_init (0.002) is larger"), std::string::npos);

  t = iteration_based("linear");
  t.weight_decay_incr_style = "linear";
  EXPECT_NE(error_of(t).find("needs start_weight_decay and end_weight_decay"), std::string::npos);

  t = iteration_based("cosinus");
  EXPECT_NE(error_of(t).find("training.lr_decay_style: \"cosinus\" is not one of"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron::train
