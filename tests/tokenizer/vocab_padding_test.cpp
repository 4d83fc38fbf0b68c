// Megatron's vocabulary padding, with the examples of MEGATRON_NOTES.md section 4.
#include <gtest/gtest.h>

#include "megatron/error.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron {
namespace {

TEST(VocabPadding, Gpt2ForEachTensorParallelSize) {
  EXPECT_EQ(padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 128, 2), 50432);
  EXPECT_EQ(padded_vocab_size(50257, 128, 4), 50688);
  EXPECT_EQ(padded_vocab_size(50257, 128, 8), 51200);
  EXPECT_EQ(padded_vocab_size(50257), 50304);
}

TEST(VocabPadding, BertWithTwoAddedTokens) {
  EXPECT_EQ(padded_vocab_size(30522 + 2), 30592);
}

TEST(VocabPadding, ExactMultipleIsUnchanged) {
  EXPECT_EQ(padded_vocab_size(50304, 128, 1), 50304);
  EXPECT_EQ(padded_vocab_size(7, 1, 1), 7);
}

TEST(VocabPadding, RefusesNonPositiveArguments) {
  EXPECT_THROW(padded_vocab_size(0), Error);
  EXPECT_THROW(padded_vocab_size(50257, 0, 1), Error);
  EXPECT_THROW(padded_vocab_size(50257, 128, 0), Error);
}

}  // namespace
}  // namespace megatron
