// bf16 and fp16 conversions: exact values, round-to-nearest-even, specials, subnormals.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "megatron/tensor/half.h"

namespace megatron {
namespace {

TEST(BFloat16, ExactValuesRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.15625f, 65504.0f, 1e-30f}) {
    const float back = static_cast<float>(bf16(static_cast<float>(bf16(v))));
    EXPECT_EQ(back, static_cast<float>(bf16(v)));
  }
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16(-2.0f).bits, 0xc000);
}

TEST(BFloat16, RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even (1.0).
  EXPECT_EQ(bf16(1.0f + 0x1p-8f).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(bf16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);
  // Slightly above halfway rounds up.
  EXPECT_EQ(bf16(1.0f + 0x1p-8f + 0x1p-20f).bits, 0x3f81);
}

TEST(BFloat16, Specials) {
  EXPECT_TRUE(std::isinf(static_cast<float>(bf16(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  // The largest finite float rounds up to infinity in bf16 (its exponent is already the max).
  EXPECT_TRUE(std::isinf(static_cast<float>(bf16(std::numeric_limits<float>::max()))));
}

TEST(Float16, KnownEncodings) {
  EXPECT_EQ(f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(f16(-2.0f).bits, 0xc000);
  EXPECT_EQ(f16(65504.0f).bits, 0x7bff);         // largest finite
  EXPECT_EQ(f16(65520.0f).bits, 0x7c00);         // rounds to infinity
  EXPECT_EQ(f16(0x1p-24f).bits, 0x0001);         // smallest subnormal
  EXPECT_EQ(f16(0x1p-25f).bits, 0x0000);         // halfway to 0: ties to even
  EXPECT_EQ(f16(0x1.8p-25f).bits, 0x0001);       // above halfway
  EXPECT_EQ(f16(0x1p-14f).bits, 0x0400);         // smallest normal
  EXPECT_EQ(f16(1.0f + 0x1p-11f).bits, 0x3c00);  // tie to even
  EXPECT_EQ(f16(1.0f + 3 * 0x1p-11f).bits, 0x3c02);
  EXPECT_EQ(f16(std::numeric_limits<float>::quiet_NaN()).bits & 0x7c00, 0x7c00);
}

TEST(Float16, EveryEncodingRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    f16 h;
    h.bits = static_cast<std::uint16_t>(bits);
    const float f = static_cast<float>(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f16(f).bits, h.bits) << "bits " << bits;
  }
}

}  // namespace
}  // namespace megatron
