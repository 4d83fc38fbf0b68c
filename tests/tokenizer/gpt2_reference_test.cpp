// GPT-2 BPE against ids made by five independent GPT-2 tokenizers (tests/tokenizer/data).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "megatron/error.h"
#include "megatron/tokenizer/gpt2_bpe_tokenizer.h"
#include "tokenizer_test_util.h"

namespace megatron {
namespace {

const std::filesystem::path kData = TOKENIZER_TEST_DATA_DIR;

class Gpt2Reference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ =
        std::make_unique<Gpt2BpeTokenizer>(std::string(MEGATRON_DATA_DIR) + "/encoder.json",
                                           std::string(MEGATRON_DATA_DIR) + "/vocab.bpe");
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  static std::unique_ptr<Gpt2BpeTokenizer> tokenizer_;
};
std::unique_ptr<Gpt2BpeTokenizer> Gpt2Reference::tokenizer_;

TEST_F(Gpt2Reference, VocabularyAndEod) {
  EXPECT_EQ(tokenizer_->vocab_size(), 50257u);
  EXPECT_EQ(tokenizer_->eod(), 50256);
  EXPECT_EQ(tokenizer_->type_name(), "GPT2BPETokenizer");
  EXPECT_EQ(tokenizer_->token_to_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tokenizer_->token_to_id("\xC4\xA0world"), 995);  // "Ġworld", SOURCES.md's sample
  EXPECT_EQ(tokenizer_->token_bytes(995), " world");
  EXPECT_EQ(tokenizer_->token_to_id("no such token at all"), std::nullopt);
}

TEST_F(Gpt2Reference, EveryReferenceString) {
  std::ifstream in(kData / "reference_ids.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    const std::string text = record.at("text");
    const auto expected = record.at("ids").get<std::vector<TokenId>>();
    SCOPED_TRACE("text: " + record.at("text").dump());
    EXPECT_EQ(tokenizer_->encode(text), expected);
    EXPECT_EQ(tokenizer_->decode(expected), text);
    ++checked;
  }
  EXPECT_EQ(checked, 20);
}

TEST_F(Gpt2Reference, EndOfTextIsOnlyAppendedNeverParsed) {
  const auto ids = tokenizer_->encode("a<|endoftext|>b");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 50256), 0);
  EXPECT_EQ(tokenizer_->decode(ids), "a<|endoftext|>b");
  const std::vector<TokenId> eod{50256};
  EXPECT_EQ(tokenizer_->decode(eod), "<|endoftext|>");
}

TEST_F(Gpt2Reference, PiecesFollowThePreTokenizer) {
  // What the pattern implies, independent of the merges: contractions are their own pieces only
  // in lower case, and a run of spaces gives its last space to the following word.
  const auto pieces = [&](const std::string& text) {
    std::vector<std::string> out;
    for (const TokenId id : tokenizer_->encode(text))
      out.emplace_back(tokenizer_->token_bytes(id));
    return out;
  };
  EXPECT_EQ(pieces("don't"), (std::vector<std::string>{"don", "'t"}));
  for (const auto& piece : pieces("DON'T"))
    EXPECT_NE(piece, "'T");
  const auto spaced = pieces("a   b");
  ASSERT_FALSE(spaced.empty());
  EXPECT_EQ(spaced.front(), "a");
  EXPECT_EQ(spaced.back(), " b");
}

TEST_F(Gpt2Reference, DecodeReplacesSplitCharacters) {
  // The robot emoji is several tokens; decoding only the first leaves an incomplete UTF-8
  // sequence, which becomes U+FFFD.
  const auto ids = tokenizer_->encode("\xF0\x9F\xA4\x96");
  ASSERT_GT(ids.size(), 1u);
  const std::vector<TokenId> first{ids.front()};
  EXPECT_EQ(tokenizer_->decode(first), "\xEF\xBF\xBD");
}

TEST_F(Gpt2Reference, RefusesInvalidUtf8AndUnknownIds) {
  try {
    tokenizer_->encode(
        "abc\xFF"
        "def");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 3"), std::string::npos)
        << e.what();
  }
  const std::vector<TokenId> padded{50300};
  try {
    tokenizer_->decode(padded);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 50300 is outside the vocabulary (0..50256)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Gpt2Reference, ThreadsEncodeIndependently) {
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

using test::CorpusHash;

std::vector<CorpusHash> corpus_hashes() {
  return test::read_corpus_hashes(kData / "corpus_token_hashes.txt");
}

class Gpt2CorpusHash : public Gpt2Reference, public ::testing::WithParamInterface<CorpusHash> {};

TEST_P(Gpt2CorpusHash, WholeFileIdsMatchReferenceHash) {
  const CorpusHash& expected = GetParam();
  std::filesystem::path path = kData / expected.file;
  if (!std::filesystem::exists(path))
    path = std::filesystem::path(MEGATRON_SHARED_CORPUS_DIR) / expected.file;
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << expected.file << " is not bundled in tests/tokenizer/data and "
                 << MEGATRON_SHARED_CORPUS_DIR << " does not have it";
  }
  const std::string text = test::read_file(path);
  const auto ids = tokenizer_->encode(text);
  EXPECT_EQ(ids.size(), expected.tokens);
  test::ScratchDir dir;
  EXPECT_EQ(test::sha256_of_ids(ids, dir), expected.sha256);
  EXPECT_TRUE(tokenizer_->decode(ids) == text) << "decode(encode(text)) differs from the text";
}

INSTANTIATE_TEST_SUITE_P(CorpusFiles, Gpt2CorpusHash, ::testing::ValuesIn(corpus_hashes()),
                         [](const auto& test_info) {
                           const std::string& file = test_info.param.file;
                           return file.substr(0, file.find('.'));
                         });

}  // namespace
}  // namespace megatron
