// BPE rules worked by hand on small byte-level vocabularies: rank order, every occurrence of the
// best pair merged left to right in one step (OpenAI's encoder.py), bytes, eod.
#include <gtest/gtest.h>

#include "megatron/tokenizer/gpt2_bpe_tokenizer.h"
#include "tokenizer_test_util.h"

namespace megatron {
namespace {

using Ids = std::vector<TokenId>;

Gpt2BpeTokenizer small_tokenizer(const test::ScratchDir& dir, const std::vector<std::string>& extra,
                                 const std::vector<std::pair<std::string, std::string>>& merges) {
  const auto files = test::write_small_vocab(dir, extra, merges);
  return Gpt2BpeTokenizer(files.vocab_file, files.merge_file);
}

TEST(Gpt2BpeRules, MergesChainInRankOrder) {
  test::ScratchDir dir;
  // ids: bytes 0..255, "ab" 256, "abc" 257, <|endoftext|> 258
  const auto tok = small_tokenizer(dir, {"ab", "abc"}, {{"a", "b"}, {"ab", "c"}});
  EXPECT_EQ(tok.vocab_size(), 259u);
  EXPECT_EQ(tok.eod(), 258);
  EXPECT_EQ(tok.encode("abc"), (Ids{257}));
  // " abc" is one piece: ' ' a b c -> ' ' ab c -> ' ' abc
  EXPECT_EQ(tok.encode(" abc"), (Ids{' ', 257}));
  // no merge joins two "ab"
  EXPECT_EQ(tok.encode("abab"), (Ids{256, 256}));
  EXPECT_EQ(tok.encode("cab"), (Ids{'c', 256}));
}

TEST(Gpt2BpeRules, LowerRankWinsWhateverItsPosition) {
  test::ScratchDir dir;
  // "b c" has rank 0, "a b" rank 1: in "abc" the later pair merges first and blocks the other.
  const auto tok = small_tokenizer(dir, {"ab", "bc"}, {{"b", "c"}, {"a", "b"}});
  EXPECT_EQ(tok.encode("abc"), (Ids{'a', 257}));
  test::ScratchDir other;
  const auto swapped = small_tokenizer(other, {"ab", "bc"}, {{"a", "b"}, {"b", "c"}});
  EXPECT_EQ(swapped.encode("abc"), (Ids{256, 'c'}));
}

TEST(Gpt2BpeRules, OverlappingOccurrencesMergeLeftToRight) {
  test::ScratchDir dir;
  const auto tok = small_tokenizer(dir, {"aa"}, {{"a", "a"}});
  EXPECT_EQ(tok.encode("aaa"), (Ids{256, 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), (Ids{256, 256}));
  EXPECT_EQ(tok.encode("aaaaa"), (Ids{256, 256, 'a'}));
}

TEST(Gpt2BpeRules, AllOccurrencesOfTheBestPairMergeBeforeTheNextRound) {
  test::ScratchDir dir;
  // "ab a" (rank 0) can only apply once "a b" (rank 1) has merged. encoder.py merges BOTH "a b"
  // in "abab" in one round, leaving "ab ab", which no merge joins. (Merging one occurrence and
  // then re-ranking would give "aba b".)
  const auto tok = small_tokenizer(dir, {"ab", "aba"}, {{"ab", "a"}, {"a", "b"}});
  EXPECT_EQ(tok.encode("abab"), (Ids{256, 256}));
  EXPECT_EQ(tok.encode("aba"), (Ids{257}));
}

TEST(Gpt2BpeRules, BytesOfMultiByteCharactersAreSymbols) {
  test::ScratchDir dir;
  const auto tok = small_tokenizer(dir, {"\xC3\xA9"}, {{"\xC3", "\xA9"}});
  EXPECT_EQ(tok.encode("\xC3\xA9t\xC3\xA9"), (Ids{256, 't', 256}));  // "été", one piece
  EXPECT_EQ(tok.encode("\xE2\x82\xAC"), (Ids{0xE2, 0x82, 0xAC}));    // "€", no merges
  EXPECT_EQ(tok.decode(Ids{0xE2, 0x82, 0xAC}), "\xE2\x82\xAC");
  EXPECT_EQ(tok.decode(Ids{0xE2, 0x82}), "\xEF\xBF\xBD");  // truncated: one U+FFFD
}

TEST(Gpt2BpeRules, PreTokenizerKeepsPiecesApart) {
  test::ScratchDir dir;
  // "a b" would merge inside a piece, but "a" and "b" separated by punctuation are two pieces.
  const auto tok = small_tokenizer(dir, {"ab"}, {{"a", "b"}});
  EXPECT_EQ(tok.encode("a-b"), (Ids{'a', '-', 'b'}));
  EXPECT_EQ(tok.encode("ab1ab"), (Ids{256, '1', 256}));
}

}  // namespace
}  // namespace megatron
