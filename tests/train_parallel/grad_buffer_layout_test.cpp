// Bucket layout of the gradient buffer: reverse order, bucket boundaries, the distributed
// optimizer's padding (parameters at multiples of 64, buckets at multiples of lcm(dp, 128)) and
// each data-parallel rank's shard ranges.
#include <gtest/gtest.h>

#include <vector>

#include "megatron/error.h"
#include "megatron/train/grad_buffer.h"

namespace megatron::train {
namespace {

TEST(GradBufferLayout, OneBucketInReverseOrderWithoutPadding) {
  const BufferLayout l = layout_buffer({10, 20, 30}, {2, false, std::nullopt});
  ASSERT_EQ(l.buckets.size(), 1u);
  EXPECT_EQ(l.param_offset, (std::vector<std::int64_t>{50, 30, 0}));
  EXPECT_EQ(l.buckets[0].params, (std::vector<std::size_t>{2, 1, 0}));
  EXPECT_EQ(l.buckets[0].numel, 60);
  EXPECT_EQ(l.numel, 60);
}

TEST(GradBufferLayout, BucketClosesOnceItHoldsBucketSizeElements) {
  const BufferLayout l = layout_buffer({10, 20, 30}, {2, false, 25});
  ASSERT_EQ(l.buckets.size(), 2u);
  EXPECT_EQ(l.buckets[0].offset, 0);
  EXPECT_EQ(l.buckets[0].numel, 30);  // the last parameter alone reaches 25
  EXPECT_EQ(l.buckets[0].params, (std::vector<std::size_t>{2}));
  EXPECT_EQ(l.buckets[1].offset, 30);
  EXPECT_EQ(l.buckets[1].numel, 30);
  EXPECT_EQ(l.buckets[1].params, (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(l.param_bucket, (std::vector<std::size_t>{1, 1, 0}));
}

TEST(GradBufferLayout, DistributedOptimizerPadsParametersAndBuckets) {
  const BufferLayout l = layout_buffer({10, 20, 30}, {4, true, std::nullopt});
  EXPECT_EQ(l.param_offset, (std::vector<std::int64_t>{128, 64, 0}));  // 64-element starts
  ASSERT_EQ(l.buckets.size(), 1u);
  EXPECT_EQ(l.buckets[0].numel, 256);  // 138 rounded up to lcm(4, 128) = 128
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(l.shard(0, r).begin, 64 * r);
    EXPECT_EQ(l.shard(0, r).end, 64 * r + 64);
  }
}

TEST(GradBufferLayout, ShardsOfOddDataParallelSizesCoverEveryBucket) {
  const BufferLayout l = layout_buffer({10, 20, 30}, {3, true, 50});
  ASSERT_EQ(l.buckets.size(), 2u);
  EXPECT_EQ(l.buckets[0].offset, 0);
  EXPECT_EQ(l.buckets[0].numel, 384);  // lcm(3, 128)
  EXPECT_EQ(l.buckets[1].offset, 384);
  EXPECT_EQ(l.buckets[1].numel, 384);
  EXPECT_EQ(l.param_offset[0], 384);
  std::int64_t owned = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(l.shard(1, r).begin, 384 + 128 * r);
    EXPECT_EQ(l.shard(1, r).size(), 128);
    owned += l.owned_elements(r);
  }
  EXPECT_EQ(owned, l.numel);
}

TEST(GradBufferLayout, MegatronDefaultBucketSize) {
  EXPECT_EQ(default_bucket_size(1), 40000000);
  EXPECT_EQ(default_bucket_size(64), 64000000);
}

TEST(GradBufferLayout, BadOptionsAreRefusedByName) {
  try {
    layout_buffer({1}, {0, false, std::nullopt});
    FAIL() << "dp 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data-parallel size"), std::string::npos) << e.what();
  }
  try {
    layout_buffer({1}, {1, false, 0});
    FAIL() << "bucket size 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ddp_bucket_size"), std::string::npos) << e.what();
  }
}

TEST(GradBufferLayout, NoParametersNoBuckets) {
  const BufferLayout l = layout_buffer({}, {2, true, 10});
  EXPECT_TRUE(l.buckets.empty());
  EXPECT_EQ(l.numel, 0);
}

}  // namespace
}  // namespace megatron::train
