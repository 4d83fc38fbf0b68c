// SentencePiece tokenizers on the bundled corpus against Debian's spm_encode CLI (the library's own
// encoder, as Megatron's Python calls it), and the shipped preprocessed dataset against both.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "megatron/data/indexed_dataset.h"
#include "megatron/tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer_test_util.h"

namespace megatron {
namespace {

using Kind = SentencePieceTokenizer::Kind;

const std::filesystem::path kData = MEGATRON_DATA_DIR;
const std::filesystem::path kModel = kData / "austen_spm.model";
const std::string kSpmEncode = SPM_ENCODE;

std::vector<std::string> corpus_texts() {
  std::ifstream in(kData / "austen_chapters.jsonl");
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line))
    texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  return texts;
}

bool have_spm_encode() {
  return !kSpmEncode.empty() && std::filesystem::exists(kSpmEncode);
}

// spm_encode --output_format=id on `lines` (one sentence per line, as the CLI reads them): one id
// list per line.
std::vector<std::vector<TokenId>> spm_encode_lines(const std::vector<std::string>& lines,
                                                   const test::ScratchDir& dir) {
  std::string input;
  for (const std::string& line : lines)
    input += line + "\n";
  test::write_file(dir / "lines.txt", input);
  const std::string command = "'" + kSpmEncode + "' --model='" + kModel.string() +
                              "' --output_format=id --input='" + (dir / "lines.txt").string() +
                              "' --output='" + (dir / "ids.txt").string() + "'";
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  std::istringstream out(test::read_file(dir / "ids.txt"));
  std::vector<std::vector<TokenId>> ids;
  std::string row;
  while (std::getline(out, row)) {
    std::istringstream fields(row);
    ids.emplace_back();
    for (TokenId id; fields >> id;)
      ids.back().push_back(id);
  }
  if (ids.size() != lines.size()) {
    throw std::runtime_error("spm_encode gave " + std::to_string(ids.size()) + " lines for " +
                             std::to_string(lines.size()));
  }
  return ids;
}

// The ids spm_encode gives each whole chapter. spm_encode reads one sentence per line, so each
// chapter is handed over on one line with its line breaks as spaces: the model's normalizer
// (nmt_nfkc, spm_train's default) maps \n to a space and collapses runs of spaces, so this is the
// same input the library sees when Megatron encodes the chapter with its \n. (The per-line test
// below compares the chapters' lines unchanged.)
class SentencePieceCorpus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    texts_ = corpus_texts();
    if (!have_spm_encode()) return;
    std::vector<std::string> one_line;
    for (std::string text : texts_) {
      std::replace(text.begin(), text.end(), '\n', ' ');
      one_line.push_back(std::move(text));
    }
    test::ScratchDir dir;
    reference_ = spm_encode_lines(one_line, dir);
  }
  void SetUp() override {
    if (!have_spm_encode()) {
      GTEST_SKIP() << "spm_encode not found (Debian package sentencepiece, which "
                      "scripts/install-deps.sh test installs); the CLI comparison is skipped";
    }
  }
  static std::vector<std::string> texts_;
  static std::vector<std::vector<TokenId>> reference_;
};
std::vector<std::string> SentencePieceCorpus::texts_;
std::vector<std::vector<TokenId>> SentencePieceCorpus::reference_;

TEST_F(SentencePieceCorpus, GptIdsEqualSpmEncodeForEveryChapter) {
  const SentencePieceTokenizer tokenizer(kModel, Kind::gpt);
  ASSERT_EQ(texts_.size(), 269u);
  std::size_t compared = 0;
  for (std::size_t d = 0; d < texts_.size(); ++d) {
    SCOPED_TRACE("chapter " + std::to_string(d));
    ASSERT_EQ(tokenizer.encode(texts_[d]), reference_[d]);
    compared += reference_[d].size();
  }
  EXPECT_EQ(compared, 897168u);  // 897,437 tokens in the dataset minus one eod per chapter
  std::cout << "compared " << compared << " ids of " << texts_.size() << " chapters\n";
}

TEST_F(SentencePieceCorpus, SpecialTokensTypeGivesTheSameIdsOnTextWithoutSpecialTokens) {
  // None of the special tokens' spellings occurs in the corpus, so Megatron's splitting at them
  // changes nothing and the ids are the model's.
  const SentencePieceTokenizer tokenizer(kModel, Kind::special_tokens);
  for (const char* special : {"<CLS>", "<SEP>", "<EOD>", "<MASK>", "<PAD>", "<s>", "</s>"}) {
    for (const std::string& text : texts_)
      ASSERT_EQ(text.find(special), std::string::npos) << special;
  }
  for (std::size_t d = 0; d < texts_.size(); ++d)
    ASSERT_EQ(tokenizer.encode(texts_[d]), reference_[d]) << "chapter " << d;
}

TEST_F(SentencePieceCorpus, EveryLineUnchangedEqualsSpmEncode) {
  std::vector<std::string> lines;
  for (const std::string& text : texts_) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      lines.push_back(line);
  }
  test::ScratchDir dir;
  const auto reference = spm_encode_lines(lines, dir);
  const SentencePieceTokenizer tokenizer(kModel, Kind::gpt);
  std::size_t compared = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    ASSERT_EQ(tokenizer.encode(lines[i]), reference[i]) << "line " << i << ": " << lines[i];
    compared += reference[i].size();
  }
  std::cout << "compared " << compared << " ids of " << lines.size() << " lines\n";
}

TEST_F(SentencePieceCorpus, ShippedDatasetIsSpmEncodeIdsPlusEosPerChapter) {
  // data/austen_spm_text_document: preprocess --append-eod --tokenizer-type
  // GPTSentencePieceTokenizer (data/SOURCES.md); eod is the model's eos, </s> = 2.
  const IndexedDataset dataset((kData / "austen_spm_text_document").string());
  ASSERT_EQ(dataset.document_count(), texts_.size());
  ASSERT_EQ(dataset.size(), texts_.size());  // one sequence per document
  EXPECT_EQ(dataset.dtype(), IndexDType::u16);
  for (std::size_t d = 0; d < texts_.size(); ++d) {
    std::vector<std::int64_t> expected(reference_[d].begin(), reference_[d].end());
    expected.push_back(2);
    ASSERT_EQ(dataset.get(d), expected) << "chapter " << d;
  }
}

TEST_F(SentencePieceCorpus, ThreadsEncodeAlike) {
  // preprocess --workers N shares one tokenizer between threads.
  const SentencePieceTokenizer tokenizer(kModel, Kind::special_tokens);
  std::vector<std::vector<std::vector<TokenId>>> per_thread(2);
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < per_thread.size(); ++t) {
      threads.emplace_back([&, t] {
        for (const std::string& text : texts_)
          per_thread[t].push_back(tokenizer.encode(text));
      });
    }
  }
  EXPECT_EQ(per_thread[0], reference_);
  EXPECT_EQ(per_thread[1], reference_);
}

}  // namespace
}  // namespace megatron
