// NullTokenizer (Megatron's synthetic tokenizer): ids as space-separated text, eod the last id,
// and its errors.
#include <gtest/gtest.h>

#include "megatron/error.h"
#include "megatron/tokenizer/null_tokenizer.h"

namespace megatron {
namespace {

TEST(NullTokenizer, TextIsSpaceSeparatedIds) {
  TokenizerFiles files;
  files.vocab_size = 32000;
  const auto t = make_tokenizer("NullTokenizer", files);
  EXPECT_EQ(t->type_name(), "NullTokenizer");
  EXPECT_EQ(t->vocab_size(), 32000u);
  EXPECT_EQ(t->eod(), 31999);
  EXPECT_EQ(t->encode("3 17 0 31999"), (std::vector<TokenId>{3, 17, 0, 31999}));
  const std::vector<TokenId> ids = {5, 0, 42};
  EXPECT_EQ(t->decode(ids), "5 0 42");
  EXPECT_EQ(t->id_to_token(7), "7");
  EXPECT_EQ(padded_vocab_size(32000, 128, 1), 32000);  // Mixtral's vocabulary needs no padding
}

TEST(NullTokenizer, RefusesWhatIsNotAnIdInTheVocabulary) {
  const NullTokenizer t(100);
  EXPECT_THROW(t.encode("3  4"), Error);  // an empty word between two spaces
  EXPECT_THROW(t.encode("3 x"), Error);
  EXPECT_THROW(t.encode("100"), Error);  // outside the vocabulary
  EXPECT_THROW(t.encode("-1"), Error);
  const std::vector<TokenId> bad = {100};
  EXPECT_THROW(t.decode(bad), Error);
  EXPECT_THROW(NullTokenizer(0), Error);
  EXPECT_THROW(make_tokenizer("NullTokenizer", TokenizerFiles()), UsageError);
}

}  // namespace
}  // namespace megatron
