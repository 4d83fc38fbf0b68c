// A context-parallel rank's share of a micro-batch: which fields are cut to its chunks, which stay
// whole, and the global positions it is given.
#include <gtest/gtest.h>

#include "megatron/nn/context_parallelism.h"

namespace megatron::nn {
namespace {

// (B, S) int32 with value 100 * b + s.
Tensor numbered(std::int64_t b, std::int64_t s) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(b * s));
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t j = 0; j < s; ++j)
      v[static_cast<std::size_t>(i * s + j)] = static_cast<std::int32_t>(100 * i + j);
  return Tensor::from(v, {b, s});
}

const SampleSpec kBertInputs = {{"text", DType::i32, {}, FieldKind::token_ids},
                                {"padding_mask", DType::i32, {}, FieldKind::mask, false, true},
                                {"position_ids", DType::i32, {}, FieldKind::value, true}};

TEST(ContextParallelBatch, CutsPerPositionFieldsToTheRanksChunksAndKeepsWholeSequenceFields) {
  Batch batch;
  batch.set("text", numbered(2, 8));
  batch.set("padding_mask", numbered(2, 8));
  batch.set("is_random", Tensor::from(std::vector<std::int32_t>{1, 0}, {2}));
  // CP2, rank 1 of 2: chunks 1 and 2 of four 2-token chunks, positions 2, 3, 4, 5.
  const Batch share =
      context_parallel_batch(batch, ContextParallelism{nullptr, 1, 2}, 8, kBertInputs);
  EXPECT_EQ(share["text"].to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{2, 3, 4, 5, 102, 103, 104, 105}));
  EXPECT_EQ(share["padding_mask"].to_vector<std::int32_t>(),
            batch["padding_mask"].to_vector<std::int32_t>());
  EXPECT_EQ(share["is_random"].to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 0}));
  // Global positions for a model that takes them, shaped like the token-id field.
  EXPECT_EQ(share["position_ids"].shape(), (Shape{2, 4}));
  EXPECT_EQ(share["position_ids"].to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{2, 3, 4, 5, 2, 3, 4, 5}));
}

TEST(ContextParallelBatch, RankZeroHoldsTheFirstAndLastChunks) {
  Batch batch;
  batch.set("text", numbered(1, 8));
  const Batch share =
      context_parallel_batch(batch, ContextParallelism{nullptr, 0, 2}, 8, kBertInputs);
  EXPECT_EQ(share["text"].to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 6, 7}));
  EXPECT_EQ(share["position_ids"].to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{0, 1, 6, 7}));
}

TEST(ContextParallelBatch, GivenPositionIdsAreCutNotReplacedAndNoneAreAddedUnasked) {
  Batch batch;
  batch.set("text", numbered(1, 8));
  batch.set("position_ids", numbered(1, 8));
  const Batch share =
      context_parallel_batch(batch, ContextParallelism{nullptr, 1, 2}, 8, kBertInputs);
  EXPECT_EQ(share["position_ids"].to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{2, 3, 4, 5}));
  const SampleSpec without = {{"text", DType::i32, {}, FieldKind::token_ids}};
  Batch plain;
  plain.set("text", numbered(1, 8));
  EXPECT_FALSE(context_parallel_batch(plain, ContextParallelism{nullptr, 1, 2}, 8, without)
                   .has("position_ids"));
}

}  // namespace
}  // namespace megatron::nn
