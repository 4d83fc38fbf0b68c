// NumpyRandomState: seeding, the bounded draw and shuffles (numpy itself is compared in
// megatron_reference.py; these are the properties and known answers that need no Python).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "expect_error.h"
#include "megatron/data/numpy_random.h"

namespace megatron::data {
namespace {

TEST(NumpyRandomState, SeedsOutsideNumpysRangeAreRefused) {
  EXPECT_ERROR_MENTIONING(NumpyRandomState(-1), "random seed -1", "[0, 4294967295]");
  EXPECT_ERROR_MENTIONING(NumpyRandomState(4294967296LL), "random seed 4294967296");
  EXPECT_NO_THROW(NumpyRandomState(4294967295LL));
}

// mt19937ar.c (Matsumoto and Nishimura) with init_genrand(5489) starts 3499211612, 581869302.
TEST(NumpyRandomState, FirstWordsMatchTheMt19937ReferenceOutput) {
  NumpyRandomState random(5489);
  EXPECT_EQ(random.next_uint32(), 3499211612u);
  EXPECT_EQ(random.next_uint32(), 581869302u);
}

TEST(NumpyRandomState, Next64IsTwoWordsHighFirst) {
  NumpyRandomState a(42), b(42);
  const std::uint64_t high = b.next_uint32();
  const std::uint64_t low = b.next_uint32();
  EXPECT_EQ(a.next_uint64(), (high << 32) | low);
}

TEST(NumpyRandomState, IntervalOfZeroDrawsNothing) {
  NumpyRandomState a(7), b(7);
  EXPECT_EQ(a.random_interval(0), 0u);
  EXPECT_EQ(a.next_uint32(), b.next_uint32());
}

TEST(NumpyRandomState, IntervalIsTheFirstMaskedWordNotAboveMax) {
  // 32-bit bound: mask 0x3FF for 1000; words above 1000 after masking are rejected.
  NumpyRandomState a(99), b(99);
  for (int i = 0; i < 200; ++i) {
    const std::uint64_t value = a.random_interval(1000);
    std::uint64_t expected = 0;
    do {
      expected = b.next_uint32() & 0x3FFu;
    } while (expected > 1000);
    ASSERT_EQ(value, expected);
  }
  // 64-bit bound: whole 64-bit words are masked.
  const std::uint64_t max = (1ULL << 40) + 12345;
  const std::uint64_t mask = (1ULL << 41) - 1;
  for (int i = 0; i < 200; ++i) {
    const std::uint64_t value = a.random_interval(max);
    std::uint64_t expected = 0;
    do {
      expected = b.next_uint64() & mask;
    } while (expected > max);
    ASSERT_EQ(value, expected);
  }
}

TEST(NumpyRandomState, ShuffleIsAPermutationAndNeedsNoDrawForOneElement) {
  NumpyRandomState random(1234);
  std::vector<std::int32_t> values(1000);
  std::iota(values.begin(), values.end(), 0);
  random.shuffle(std::span(values));
  std::vector<std::int32_t> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  for (std::int32_t i = 0; i < 1000; ++i)
    ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i);
  EXPECT_NE(values[0], 0);

  NumpyRandomState a(5), b(5);
  std::vector<std::int64_t> one = {17};
  a.shuffle(std::span(one));
  std::vector<std::int64_t> none;
  a.shuffle(std::span(none));
  EXPECT_EQ(one[0], 17);
  EXPECT_EQ(a.next_uint32(), b.next_uint32());
}

TEST(NumpyRandomState, ShuffleDrawsDoNotDependOnTheElementType) {
  NumpyRandomState a(321), b(321);
  std::vector<std::int32_t> narrow(513);
  std::vector<std::int64_t> wide(513);
  std::iota(narrow.begin(), narrow.end(), 0);
  std::iota(wide.begin(), wide.end(), 0);
  a.shuffle(std::span(narrow));
  b.shuffle(std::span(wide));
  for (std::size_t i = 0; i < narrow.size(); ++i)
    ASSERT_EQ(narrow[i], wide[i]);
}

}  // namespace
}  // namespace megatron::data
