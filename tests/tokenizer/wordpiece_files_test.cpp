// Reading BERT vocab files as Megatron's load_vocab does, the tokens Megatron appends, the errors
// for unusable files, and the --tokenizer-type factory for the two BERT types.
#include <gtest/gtest.h>

#include "common/expect_error.h"
#include "megatron/error.h"
#include "megatron/tokenizer/gpt2_bpe_tokenizer.h"
#include "megatron/tokenizer/wordpiece_tokenizer.h"
#include "tokenizer_test_util.h"

namespace megatron {
namespace {

using Case = WordPieceTokenizer::Case;

class WordPieceFiles : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& contents) {
    const auto path = dir_ / "vocab.txt";
    test::write_file(path, contents);
    return path;
  }
  test::ScratchDir dir_;
};

TEST_F(WordPieceFiles, LinesEndAtAnyNewlineAndAreStripped) {
  // \r\n, \r and \n all end a line; spaces, tabs and U+3000 around a token go; a last line
  // without a newline still counts.
  const WordPieceTokenizer tokenizer(
      write("[PAD]\r\n[UNK]\r[CLS]\n  [SEP] \t\n\xE3\x80\x80[MASK]\nhello"), Case::lower);
  EXPECT_EQ(tokenizer.token_to_id("[SEP]"), 3);
  EXPECT_EQ(tokenizer.special_token(SpecialToken::mask), 4);
  EXPECT_EQ(tokenizer.encode("Hello"), (std::vector<TokenId>{5}));
  EXPECT_EQ(tokenizer.vocab_size(), 8u);  // 6 lines, [BOS], [EOS]
  EXPECT_EQ(tokenizer.special_token(SpecialToken::bos), 6);
  EXPECT_EQ(tokenizer.eod(), 7);
}

TEST_F(WordPieceFiles, AnEmptyLineIsATokenAndHasAnId) {
  const WordPieceTokenizer tokenizer(write("[PAD]\n\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"), Case::lower);
  EXPECT_EQ(tokenizer.id_to_token(1), "");
  EXPECT_EQ(tokenizer.token_to_id("[UNK]"), 2);
  EXPECT_EQ(tokenizer.vocab_size(), 8u);
}

TEST_F(WordPieceFiles, PresentSpecialsAreNotAppendedAgain) {
  const WordPieceTokenizer tokenizer(
      write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n[EOS]\n<extra_id_1>\n"), Case::lower, 3);
  EXPECT_EQ(tokenizer.eod(), 5);
  EXPECT_EQ(tokenizer.special_token(SpecialToken::eos), 5);
  EXPECT_EQ(tokenizer.special_token(SpecialToken::bos), 7);
  // <extra_id_0> and <extra_id_2> are new; <extra_id_1> keeps its line.
  EXPECT_EQ(tokenizer.additional_special_token_ids(), (std::vector<TokenId>{8, 6, 9}));
  EXPECT_EQ(tokenizer.vocab_size(), 10u);
}

TEST_F(WordPieceFiles, NamesTheMissingSpecialToken) {
  const auto path = write("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
  testing::expect_error_message([&] { WordPieceTokenizer(path, Case::lower); },
                                "BERT vocab file " + path.string() +
                                    " has no [MASK] token (the BERT WordPiece tokenizers need "
                                    "[CLS], [SEP], [PAD] and [MASK])");
  const auto two = write("[PAD]\n[SEP]\n");
  testing::expect_error_message([&] { WordPieceTokenizer(two, Case::keep); },
                                "BERT vocab file " + two.string() +
                                    " has no [CLS], [MASK] tokens (the BERT WordPiece tokenizers "
                                    "need [CLS], [SEP], [PAD] and [MASK])");
}

TEST_F(WordPieceFiles, RefusesUnreadableInvalidOrAmbiguousFiles) {
  const auto missing = dir_ / "no-such-vocab.txt";
  testing::expect_error_message(
      [&] { WordPieceTokenizer(missing, Case::lower); },
      "BERT vocab file " + missing.string() + ": cannot open: No such file or directory");
  const auto invalid = write("[PAD]\n[UNK]\nab\xC3(\n[CLS]\n[SEP]\n[MASK]\n");
  testing::expect_error_message(
      [&] { WordPieceTokenizer(invalid, Case::lower); },
      "BERT vocab file " + invalid.string() + ": line 3 is not valid UTF-8 at byte 2 of the line");
  // Megatron would count "the" once and give [BOS] the id of an existing line.
  const auto repeated = write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n the\n");
  testing::expect_error_message([&] { WordPieceTokenizer(repeated, Case::lower); },
                                "BERT vocab file " + repeated.string() +
                                    ": line 7 repeats the token \"the\" of line 6 (lines are "
                                    "compared after stripping spaces)");
  const auto good = write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
  testing::expect_error_message([&] { WordPieceTokenizer(good, Case::lower, -1); },
                                "--vocab-extra-ids must not be negative (got -1)");
}

TEST(TokenizerFactory, MakesBothBertTypes) {
  const std::string vocab = std::string(MEGATRON_DATA_DIR) + "/bert-base-uncased-vocab.txt";
  const auto lower = make_tokenizer("BertWordPieceLowerCase", {vocab, "", 2});
  EXPECT_EQ(lower->type_name(), "BertWordPieceLowerCase");
  EXPECT_EQ(lower->vocab_size(), 30526u);
  EXPECT_EQ(lower->additional_special_token_ids(), (std::vector<TokenId>{30524, 30525}));
  EXPECT_EQ(lower->encode("Hello"), (std::vector<TokenId>{7592}));
  const auto keep = make_tokenizer("BertWordPieceCase", {vocab, "", 0});
  EXPECT_EQ(keep->type_name(), "BertWordPieceCase");
  EXPECT_EQ(keep->encode("Hello hello"), (std::vector<TokenId>{100, 7592}));
  try {
    make_tokenizer("BertWordPieceCase", {});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "BertWordPieceCase needs --vocab-file");
  }
}

TEST(TokenizerFactory, Gpt2HasNoBertSpecials) {
  // Megatron's GPT2BPETokenizer defines only eod; its other special properties raise.
  const auto gpt2 =
      make_tokenizer("GPT2BPETokenizer", {std::string(MEGATRON_DATA_DIR) + "/encoder.json",
                                          std::string(MEGATRON_DATA_DIR) + "/vocab.bpe"});
  for (const auto role : {SpecialToken::cls, SpecialToken::sep, SpecialToken::pad,
                          SpecialToken::mask, SpecialToken::bos, SpecialToken::eos}) {
    EXPECT_EQ(gpt2->special_token(role), std::nullopt);
  }
  EXPECT_TRUE(gpt2->additional_special_token_ids().empty());
  EXPECT_EQ(gpt2->id_to_token(995), "\xC4\xA0world");  // "Ġworld", as encoder.json spells it
  EXPECT_EQ(gpt2->id_to_token(50256), "<|endoftext|>");
  testing::expect_error_message([&] { gpt2->id_to_token(50257); },
                                "GPT2BPETokenizer: id 50257 is outside the vocabulary (0..50256)");
}

}  // namespace
}  // namespace megatron
