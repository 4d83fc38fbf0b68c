// GPT document, sample and shuffle indices: the worked example of MEGATRON_NOTES.md section 2,
// hand-computed epoch rules, and structural properties (element-by-element agreement with a
// Python re-implementation of Megatron is checked in megatron_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "data/gpt_index_rules.h"
#include "expect_error.h"
#include "megatron/data/gpt_indices.h"

namespace megatron::data {
namespace {

GptIndexOptions options_for(std::int64_t sequence_length, std::optional<std::int64_t> samples,
                            std::int64_t seed = 1234) {
  GptIndexOptions options;
  options.sequence_length = sequence_length;
  options.num_samples = samples;
  options.seed = seed;
  return options;
}

// Documents a (5 tokens), b (3) and c (2) as sequences 1, 0 and 2, in the order a, b, c.
TEST(GptIndices, NotesWorkedExample) {
  const std::vector<std::int32_t> lengths = {3, 5, 2};
  GptIndices indices;
  indices.document_index = {1, 0, 2};
  indices.sample_index = build_sample_index(lengths, indices.document_index, 4, 1, 10, true, true);
  EXPECT_EQ(indices.sample_index, IndexArray(std::vector<std::int32_t>{0, 0, 0, 4, 2, 0}, {3, 2}));

  indices.shuffle_index = IndexArray(std::vector<std::uint32_t>{0, 1}, {2});
  indices.sequence_length = 4;
  // Sample 0 = a0..a4; sample 1 = a4, b0, b1, b2, c0: the samples share a4.
  EXPECT_EQ(indices.sample_pieces(0, lengths), (std::vector<SamplePiece>{{1, 0, 5}}));
  EXPECT_EQ(indices.sample_pieces(1, lengths),
            (std::vector<SamplePiece>{{1, 4, 1}, {0, 0, 3}, {2, 0, 1}}));
  EXPECT_ERROR_MENTIONING(indices.sample_pieces(2, lengths), "sample 2 is outside", "2 samples");
}

TEST(GptIndices, EpochsCoverTheRequestedTokensPlusOne) {
  // 5 samples of 4 tokens need 21 tokens: three epochs of 10.
  EXPECT_EQ(gpt_num_epochs(10, options_for(4, 5)), 3);
  EXPECT_EQ(gpt_num_epochs(10, options_for(4, 4)), 2);  // 17 tokens
  EXPECT_EQ(gpt_num_epochs(10, options_for(4, std::nullopt)), 1);
  GptIndexOptions no_extra = options_for(5, 4);
  no_extra.add_extra_token = false;
  EXPECT_EQ(gpt_num_epochs(10, no_extra), 2);  // exactly 20 tokens
}

TEST(GptIndices, FinalEpochIsSeparateBelowEightyPercent) {
  // T = 100, S = 10: 9 samples per epoch, threshold int(0.8 * 9) = 7. Two epochs give
  // (100 - 1) // 10 = 9 samples before the last one.
  EXPECT_TRUE(gpt_separate_final_epoch(100, 2, options_for(10, 10)));   // 1 from the last
  EXPECT_TRUE(gpt_separate_final_epoch(100, 2, options_for(10, 15)));   // 6 < 7
  EXPECT_FALSE(gpt_separate_final_epoch(100, 2, options_for(10, 16)));  // 7 is not < 7
  EXPECT_FALSE(gpt_separate_final_epoch(100, 1, options_for(10, 5)));
}

TEST(GptIndices, IndexDtypesWidenOnlyWhenNeeded) {
  EXPECT_EQ(sample_index_dtype(2147483647, {}), IndexDtype::kInt32);
  EXPECT_EQ(sample_index_dtype(2147483648, {}), IndexDtype::kInt64);
  EXPECT_EQ(shuffle_index_dtype(4294967293LL), IndexDtype::kUInt32);
  EXPECT_EQ(shuffle_index_dtype(4294967294LL), IndexDtype::kInt64);
  // Keeping the last partial sample rounds the count up, in single precision.
  EXPECT_EQ(gpt_sample_count(10, 1, 4, 1, true), 2);
  EXPECT_EQ(gpt_sample_count(10, 1, 4, 1, false), 3);
}

class GptIndicesOnData : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::int32_t i = 0; i < 40; ++i)
      lengths_.push_back((i * 7) % 13 + 1);
    for (std::int32_t i = 5; i < 40; ++i)
      ids_.push_back(i);
  }
  std::vector<std::int32_t> lengths_;
  std::vector<std::int32_t> ids_;
};

TEST_F(GptIndicesOnData, EverySampleHasSequenceLengthPlusOneTokens) {
  const GptIndices indices = build_gpt_indices(ids_, lengths_, options_for(16, 32));
  ASSERT_EQ(indices.num_epochs, 3);  // 35 sequences of 251 tokens; 32 * 16 + 1 = 513
  EXPECT_EQ(indices.size(), (3 * indices.tokens_per_epoch - 1) / 16);
  for (std::int64_t item = 0; item < indices.size(); ++item) {
    std::int64_t tokens = 0;
    for (const SamplePiece& piece : indices.sample_pieces(item, lengths_)) {
      EXPECT_GE(piece.offset, 0);
      EXPECT_LE(piece.offset + piece.length, lengths_[static_cast<std::size_t>(piece.sequence_id)]);
      tokens += piece.length;
    }
    EXPECT_EQ(tokens, 17) << "item " << item;
  }
}

TEST_F(GptIndicesOnData, SeparateFinalEpochIsShuffledOnItsOwn) {
  // 251 tokens per epoch, 15 samples per epoch; 32 samples need 3 epochs and the third gives
  // 32 - (2 * 251 - 1) // 16 = 1 sample, below int(0.8 * 15) = 12: separate.
  const GptIndices indices = build_gpt_indices(ids_, lengths_, options_for(16, 32));
  ASSERT_TRUE(indices.separate_final_epoch);
  const std::size_t per_epoch = ids_.size();
  std::map<std::int32_t, int> first_epochs;
  for (std::size_t i = 0; i < 2 * per_epoch; ++i)
    ++first_epochs[indices.document_index[i]];
  for (std::int32_t id : ids_)
    EXPECT_EQ(first_epochs[id], 2) << "sequence " << id;
  std::vector<std::int32_t> last(indices.document_index.begin() + 2 * static_cast<long>(per_epoch),
                                 indices.document_index.end());
  std::sort(last.begin(), last.end());
  EXPECT_EQ(last, ids_);

  const std::int64_t before_final = (2 * 251 - 1) / 16;
  for (std::int64_t k = 0; k < indices.size(); ++k) {
    const std::int64_t sample = indices.shuffle_index[static_cast<std::size_t>(k)];
    EXPECT_EQ(sample < before_final, k < before_final) << "shuffle position " << k;
  }
}

TEST_F(GptIndicesOnData, SameSeedSameOrderOtherSeedOtherOrder) {
  const GptIndices a = build_gpt_indices(ids_, lengths_, options_for(16, 20, 7));
  const GptIndices b = build_gpt_indices(ids_, lengths_, options_for(16, 20, 7));
  const GptIndices c = build_gpt_indices(ids_, lengths_, options_for(16, 20, 8));
  EXPECT_EQ(a.document_index, b.document_index);
  EXPECT_EQ(a.shuffle_index, b.shuffle_index);
  EXPECT_NE(a.document_index, c.document_index);
}

TEST_F(GptIndicesOnData, BadRequestsAreRefused) {
  EXPECT_ERROR_MENTIONING(build_gpt_indices(ids_, lengths_, options_for(1, 3)),
                          "sequence length 1 must be at least 2");
  EXPECT_ERROR_MENTIONING(build_gpt_indices({}, lengths_, options_for(8, 3)),
                          "0 sequence(s) with 0 token(s)");
  const std::vector<std::int32_t> outside = {3, 40};
  EXPECT_ERROR_MENTIONING(build_gpt_indices(outside, lengths_, options_for(8, 3)),
                          "sequence id 40 is outside the dataset's 40 sequences");
  EXPECT_ERROR_MENTIONING(build_gpt_indices(ids_, lengths_, options_for(8, -1)),
                          "sample count -1 is negative");
  EXPECT_ERROR_MENTIONING(build_gpt_indices(ids_, lengths_, options_for(8, 3, -5)),
                          "random seed -5");
}

}  // namespace
}  // namespace megatron::data
