// Loss scaler sequences worked out by hand from Megatron's DynamicGradScaler.update().
#include <gtest/gtest.h>

#include "megatron/config/core_config.h"
#include "megatron/error.h"
#include "megatron/train/loss_scaler.h"

namespace megatron::train {
namespace {

DynamicLossScalerOptions small(double initial, double min, std::int64_t window,
                               std::int64_t hysteresis) {
  DynamicLossScalerOptions o;
  o.initial_scale = initial;
  o.min_scale = min;
  o.growth_interval = window;
  o.hysteresis = hysteresis;
  return o;
}

TEST(DynamicLossScaler, HysteresisDelaysTheFirstBackoff) {
  DynamicLossScaler s(small(1024, 1, 3, 2));
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.hysteresis_tracker(), 2);
  s.update(true);  // tracker 2 -> 1: no back-off yet
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.hysteresis_tracker(), 1);
  s.update(true);  // tracker 0: halve
  EXPECT_EQ(s.scale(), 512.0f);
  s.update(true);  // tracker -1: every further overflow halves again
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_EQ(s.hysteresis_tracker(), -1);
}

TEST(DynamicLossScaler, GrowsAfterTheWindowAndResetsHysteresis) {
  DynamicLossScaler s(small(1024, 1, 3, 2));
  s.update(true);
  s.update(true);  // 512, hysteresis tracker 0
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.growth_tracker(), 2);
  EXPECT_EQ(s.hysteresis_tracker(), 0);  // clean steps alone do not restore it
  EXPECT_EQ(s.scale(), 512.0f);
  s.update(false);  // third clean step: x2, both trackers reset
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.hysteresis_tracker(), 2);
  s.update(true);  // hysteresis again absorbs one overflow
  EXPECT_EQ(s.scale(), 1024.0f);
}

TEST(DynamicLossScaler, OverflowResetsTheGrowthWindow) {
  DynamicLossScaler s(small(1024, 1, 3, 2));
  s.update(false);
  s.update(false);
  s.update(true);  // growth tracker back to 0; hysteresis 1, scale kept
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0f);
  s.update(true);  // hysteresis tracker 1 -> 0 although clean steps came between: halve
  EXPECT_EQ(s.scale(), 512.0f);
}

TEST(DynamicLossScaler, BackoffIsClampedAtTheMinimum) {
  DynamicLossScaler s(small(4, 2, 1000, 1));
  s.update(true);
  EXPECT_EQ(s.scale(), 2.0f);
  s.update(true);  // max(2 x 0.5, 2)
  EXPECT_EQ(s.scale(), 2.0f);
  EXPECT_EQ(s.inv_scale(), 0.5f);
}

TEST(DynamicLossScaler, MegatronDefaultsGrowAfterAThousandCleanSteps) {
  DynamicLossScaler s{DynamicLossScalerOptions{}};
  EXPECT_EQ(s.scale(), 4294967296.0f);  // 2^32
  for (int i = 0; i < 999; ++i)
    s.update(false);
  EXPECT_EQ(s.scale(), 4294967296.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 8589934592.0f);  // 2^33
}

TEST(DynamicLossScaler, StateRoundTrips) {
  DynamicLossScaler a(small(1024, 1, 3, 2));
  a.update(true);
  a.update(false);
  const auto st = a.state();
  EXPECT_EQ(st, (LossScalerState{1024.0f, 1, 1}));
  DynamicLossScaler b(small(1024, 1, 3, 2));
  b.load_state(st);
  a.update(true);
  b.update(true);
  EXPECT_EQ(a.state(), b.state());
  EXPECT_EQ(b.scale(), 512.0f);
}

TEST(DynamicLossScaler, MegatronAssertsAreConfigErrors) {
  auto error_of = [](const DynamicLossScalerOptions& o) -> std::string {
    try {
      DynamicLossScaler s(o);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(error_of(small(4, 8, 10, 2))
                .find("training.min_loss_scale (8.0) is larger than "
                      "initial_loss_scale (4.0)"),
            std::string::npos);
  EXPECT_NE(error_of(small(4, 1, 10, 0)).find("training.hysteresis (0) must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of(small(4, 1, 0, 2)).find("training.loss_scale_window (0) must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of(small(4, 0, 10, 2)).find("training.min_loss_scale (0.0) must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of(small(1e300, 1, 10, 2))
                .find("training.initial_loss_scale (1e+300) does not fit in fp32"),
            std::string::npos);
}

TEST(ConstantLossScaler, NeverChanges) {
  ConstantLossScaler s(128.0);
  s.update(true);
  s.update(false);
  EXPECT_EQ(s.scale(), 128.0f);
  EXPECT_FALSE(s.is_dynamic());
  s.load_state({4.0f, 3, 3});  // Megatron's constant state is empty: the config wins
  EXPECT_EQ(s.scale(), 128.0f);
}

TEST(MakeLossScaler, FollowsMegatronsOptimizerSetup) {
  config::TrainingConfig t;
  EXPECT_EQ(make_loss_scaler(t), nullptr);  // fp32
  t.bf16 = true;
  EXPECT_EQ(make_loss_scaler(t), nullptr);  // bf16 without a static scale
  t.loss_scale = 1024.0;
  auto constant = make_loss_scaler(t);
  ASSERT_NE(constant, nullptr);
  EXPECT_FALSE(constant->is_dynamic());
  EXPECT_EQ(constant->scale(), 1024.0f);

  t.bf16 = false;
  t.fp16 = true;
  EXPECT_FALSE(make_loss_scaler(t)->is_dynamic());  // fp16 with a static scale
  t.loss_scale.reset();
  t.initial_loss_scale = 65536.0;
  t.min_loss_scale = 2.0;
  t.loss_scale_window = 5;
  t.hysteresis = 1;
  auto dynamic = make_loss_scaler(t);
  ASSERT_TRUE(dynamic->is_dynamic());
  EXPECT_EQ(dynamic->state(), (LossScalerState{65536.0f, 0, 1}));
  dynamic->update(true);  // hysteresis 1: the first overflow halves
  EXPECT_EQ(dynamic->scale(), 32768.0f);
  for (int i = 0; i < 5; ++i)
    dynamic->update(false);
  EXPECT_EQ(dynamic->scale(), 65536.0f);
}

}  // namespace
}  // namespace megatron::train
