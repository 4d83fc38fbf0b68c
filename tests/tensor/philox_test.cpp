// Philox4x32-10 against Random123's published known-answer vectors, and the derived uniform and
// normal streams' statistics and index independence.
#include <cmath>

#include <gtest/gtest.h>

#include "megatron/tensor/philox.h"

namespace megatron {
namespace {

void expect_block(Philox4 got, std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) {
  EXPECT_EQ(got.v[0], a);
  EXPECT_EQ(got.v[1], b);
  EXPECT_EQ(got.v[2], c);
  EXPECT_EQ(got.v[3], d);
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  expect_block(philox4x32_10({{0, 0, 0, 0}}, 0, 0), 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
  expect_block(philox4x32_10({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff),
               0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
  expect_block(philox4x32_10({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
               0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1);
}

TEST(Philox, SeedAndCounterMapToKeyAndLowCounterWords) {
  const Philox4 a = philox4x32(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull);
  const Philox4 b = philox4x32_10({{0x243f6a88, 0x85a308d3, 0, 0}}, 0xa4093822, 0x299f31d0);
  expect_block(a, b.v[0], b.v[1], b.v[2], b.v[3]);
}

TEST(Philox, UniformStreamIsInUnitIntervalWithTheRightMoments) {
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const float u = philox_uniform_at(42, 0, i);
    ASSERT_GT(u, 0.0f);
    ASSERT_LE(u, 1.0f);
    sum += u;
    sum_sq += double(u) * u;
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 1e-3);
}

TEST(Philox, NormalStreamHasZeroMeanAndUnitVariance) {
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double z = philox_normal_at(7, 1000, i);
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sum_sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 5 / std::sqrt(double(n)));
  EXPECT_NEAR(sum_sq / n, 1.0, 0.02);
}

TEST(Philox, OffsetShiftsTheStream) {
  // Element i of the stream at offset o is element o + i at offset 0: a stream can be cut anywhere.
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(philox_uniform_at(3, 17, i), philox_uniform_at(3, 0, 17 + i));
    EXPECT_EQ(philox_normal_at(3, 17, i), philox_normal_at(3, 0, 17 + i));
  }
  EXPECT_NE(philox_uniform_at(3, 0, 0), philox_uniform_at(4, 0, 0));
}

}  // namespace
}  // namespace megatron
