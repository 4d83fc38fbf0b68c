// BertWordPieceLowerCase with bert-base-uncased against ids from independent implementations
// (tests/tokenizer/data/bert), its special ids, Megatron's detokenize and concurrent encoding.
#include <memory>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/expect_error.h"
#include "megatron/error.h"
#include "megatron/tokenizer/wordpiece_tokenizer.h"
#include "tokenizer_test_util.h"

namespace megatron {
namespace {

const std::filesystem::path kData = TOKENIZER_TEST_DATA_DIR;
const std::filesystem::path kBertData = kData / "bert";
const std::filesystem::path kVocab =
    std::filesystem::path(MEGATRON_DATA_DIR) / "bert-base-uncased-vocab.txt";

class BertUncased : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = std::make_unique<WordPieceTokenizer>(kVocab, WordPieceTokenizer::Case::lower);
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  static std::unique_ptr<WordPieceTokenizer> tokenizer_;
};
std::unique_ptr<WordPieceTokenizer> BertUncased::tokenizer_;

TEST_F(BertUncased, EveryReferenceString) {
  std::ifstream in(kBertData / "reference_ids.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    const std::string text = record.at("text");
    const auto expected_ids = record.at("ids").get<std::vector<TokenId>>();
    const auto expected_tokens = record.at("tokens").get<std::vector<std::string>>();
    SCOPED_TRACE("text: " + record.at("text").dump());
    const auto ids = tokenizer_->encode(text);
    EXPECT_EQ(ids, expected_ids);
    std::vector<std::string> tokens;
    for (const TokenId id : ids)
      tokens.push_back(tokenizer_->id_to_token(id));
    EXPECT_EQ(tokens, expected_tokens);
    ++checked;
  }
  EXPECT_EQ(checked, 20);
}

TEST_F(BertUncased, SpecialIdsAndAppendedTokens) {
  EXPECT_EQ(tokenizer_->type_name(), "BertWordPieceLowerCase");
  EXPECT_EQ(tokenizer_->special_token(SpecialToken::pad), 0);
  EXPECT_EQ(tokenizer_->special_token(SpecialToken::cls), 101);
  EXPECT_EQ(tokenizer_->special_token(SpecialToken::sep), 102);
  EXPECT_EQ(tokenizer_->special_token(SpecialToken::mask), 103);
  EXPECT_EQ(tokenizer_->token_to_id("[UNK]"), 100);
  // The file has 30522 lines and no [BOS]/[EOS]: Megatron appends them, and eod is [EOS].
  EXPECT_EQ(tokenizer_->special_token(SpecialToken::bos), 30522);
  EXPECT_EQ(tokenizer_->special_token(SpecialToken::eos), 30523);
  EXPECT_EQ(tokenizer_->eod(), 30523);
  EXPECT_EQ(tokenizer_->vocab_size(), 30524u);
  EXPECT_EQ(padded_vocab_size(std::int64_t(tokenizer_->vocab_size())), 30592);
  EXPECT_EQ(tokenizer_->id_to_token(30522), "[BOS]");
  EXPECT_EQ(tokenizer_->id_to_token(30523), "[EOS]");
  EXPECT_EQ(tokenizer_->id_to_token(0), "[PAD]");
  EXPECT_EQ(tokenizer_->id_to_token(30521), "##～");  // the file's last line
  EXPECT_TRUE(tokenizer_->additional_special_token_ids().empty());
}

TEST_F(BertUncased, ExtraIdsAreAppendedAfterBosAndEos) {
  const WordPieceTokenizer with_extras(kVocab, WordPieceTokenizer::Case::lower, 3);
  EXPECT_EQ(with_extras.vocab_size(), 30527u);
  EXPECT_EQ(with_extras.additional_special_token_ids(),
            (std::vector<TokenId>{30524, 30525, 30526}));
  EXPECT_EQ(with_extras.id_to_token(30524), "<extra_id_0>");
  EXPECT_EQ(with_extras.id_to_token(30526), "<extra_id_2>");
  EXPECT_EQ(with_extras.eod(), 30523);
  // Text spelling a sentinel is split at its punctuation like any other text.
  EXPECT_EQ(with_extras.encode("<extra_id_0>"), tokenizer_->encode("< extra _ id _ 0 >"));
}

TEST_F(BertUncased, DecodeIsMegatronsDetokenize) {
  // Joined by spaces, "##" pieces glued on, then the space before . , ! ? and inside
  // ' contractions removed.
  const std::string text =
      "Hello, world! It's a test. I'm sure they've done what you're saying, aren't you? Don't.";
  EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text)),
            "hello, world! it's a test. i'm sure they've done what you're saying, aren't you? "
            "don't.");
  EXPECT_EQ(tokenizer_->decode(tokenizer_->encode("Unaffable strawberries")),
            "unaffable strawberries");
  // Special tokens are plain strings to detokenize.
  const std::vector<TokenId> ids{101, 7592, 1010, 2088, 999, 102, 30523};
  EXPECT_EQ(tokenizer_->decode(ids), "[CLS] hello, world! [SEP] [EOS]");
  EXPECT_EQ(tokenizer_->decode(std::vector<TokenId>{}), "");
  // A leading "##" piece keeps its "##": only " ##" is removed.
  const std::vector<TokenId> continuation_first{2050, 2050};  // ##a ##a
  EXPECT_EQ(tokenizer_->decode(continuation_first), "##aa");
}

TEST_F(BertUncased, RefusesInvalidUtf8AndUnknownIds) {
  testing::expect_error_message([] { tokenizer_->encode("abc\xFF"); },
                                "text is not valid UTF-8 at byte 3");
  testing::expect_error_message(
      [] { tokenizer_->decode(std::vector<TokenId>{30524}); },
      "BertWordPieceLowerCase: id 30524 is outside the vocabulary (0..30523)");
  testing::expect_error_message(
      [] { tokenizer_->id_to_token(-1); },
      "BertWordPieceLowerCase: id -1 is outside the vocabulary (0..30523)");
}

TEST_F(BertUncased, ThreadsEncodeIndependently) {
  const std::string text = test::read_file(kData / "jargon_file.txt").substr(0, 200000);
  const auto expected = tokenizer_->encode(text);
  std::vector<TokenId> a, b;
  std::thread first([&] { tokenizer_->encode(text, a); });
  std::thread second([&] { tokenizer_->encode(text, b); });
  first.join();
  second.join();
  EXPECT_EQ(a, expected);
  EXPECT_EQ(b, expected);
}

class BertCorpusHash : public BertUncased,
                       public ::testing::WithParamInterface<test::CorpusHash> {};

TEST_P(BertCorpusHash, WholeFileIdsMatchReferenceHash) {
  const test::CorpusHash& expected = GetParam();
  std::filesystem::path path = kData / expected.file;
  if (!std::filesystem::exists(path))
    path = std::filesystem::path(MEGATRON_SHARED_CORPUS_DIR) / expected.file;
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << expected.file << " is not bundled in tests/tokenizer/data and "
                 << MEGATRON_SHARED_CORPUS_DIR << " does not have it";
  }
  const auto ids = tokenizer_->encode(test::read_file(path));
  EXPECT_EQ(ids.size(), expected.tokens);
  test::ScratchDir dir;
  EXPECT_EQ(test::sha256_of_ids(ids, dir), expected.sha256);
}

INSTANTIATE_TEST_SUITE_P(CorpusFiles, BertCorpusHash,
                         ::testing::ValuesIn(test::read_corpus_hashes(kBertData /
                                                                      "corpus_token_hashes.txt")),
                         [](const auto& test_info) {
                           const std::string& file = test_info.param.file;
                           return file.substr(0, file.find('.'));
                         });

}  // namespace
}  // namespace megatron
