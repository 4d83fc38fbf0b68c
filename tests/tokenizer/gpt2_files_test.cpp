// encoder.json / vocab.bpe that cannot be used are refused, naming the file and the line or token.
#include <gtest/gtest.h>

#include "megatron/error.h"
#include "megatron/tokenizer/gpt2_bpe_tokenizer.h"
#include "megatron/tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace megatron {
namespace {

// Loads the files and returns the error message ("" when loading succeeds).
std::string load_error(const std::filesystem::path& vocab, const std::filesystem::path& merges) {
  try {
    Gpt2BpeTokenizer tokenizer(vocab, merges);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

class Gpt2Files : public ::testing::Test {
 protected:
  void SetUp() override { good_ = test::write_small_vocab(dir_, {"ab"}, {{"a", "b"}}); }

  // The good merges with `vocab_json` as the vocabulary.
  std::string vocab_error(const std::string& vocab_json) {
    test::write_file(dir_ / "bad.json", vocab_json);
    return load_error(dir_ / "bad.json", good_.merge_file);
  }
  // The good vocabulary with `merges_text` as the merges.
  std::string merges_error(const std::string& merges_text) {
    test::write_file(dir_ / "bad.txt", merges_text);
    return load_error(good_.vocab_file, dir_ / "bad.txt");
  }
  nlohmann::json good_vocab() { return nlohmann::json::parse(test::read_file(good_.vocab_file)); }

  test::ScratchDir dir_;
  test::SmallVocab good_;
};

#define EXPECT_MESSAGE(message, fragment) \
  EXPECT_NE((message).find(fragment), std::string::npos) << "message: " << (message)

TEST_F(Gpt2Files, GoodFilesLoad) {
  EXPECT_EQ(load_error(good_.vocab_file, good_.merge_file), "");
}

TEST_F(Gpt2Files, MissingFiles) {
  const auto missing = (dir_ / "none.json").string();
  EXPECT_MESSAGE(load_error(missing, good_.merge_file),
                 "GPT-2 vocab file " + missing + ": cannot open: No such file or directory");
  const auto missing_merges = (dir_ / "none.txt").string();
  EXPECT_MESSAGE(load_error(good_.vocab_file, missing_merges),
                 "GPT-2 merge file " + missing_merges + ": cannot open");
}

TEST_F(Gpt2Files, VocabNotJson) {
  const auto message = vocab_error("{\"a\": 1,\n \"b\" 2}");
  EXPECT_MESSAGE(message, "bad.json: not valid JSON");
  EXPECT_MESSAGE(message, "line 2, column 6");
}

TEST_F(Gpt2Files, VocabNotAnObject) {
  EXPECT_MESSAGE(vocab_error("[1, 2]"),
                 "bad.json: expected a JSON object mapping each token to its id, found a array");
}

TEST_F(Gpt2Files, VocabIdNotAnInteger) {
  auto vocab = good_vocab();
  vocab["ab"] = "256";
  EXPECT_MESSAGE(vocab_error(vocab.dump()),
                 "bad.json: token \"ab\": expected an integer id, found a string");
  vocab["ab"] = 256.5;
  EXPECT_MESSAGE(vocab_error(vocab.dump()),
                 "bad.json: token \"ab\": expected an integer id, found a non-integer number");
}

TEST_F(Gpt2Files, VocabIdsMustBeZeroToNMinusOne) {
  auto vocab = good_vocab();  // 258 tokens
  vocab["ab"] = 300;
  EXPECT_MESSAGE(vocab_error(vocab.dump()),
                 "token \"ab\": id 300 is outside 0..257 (the file has 258 tokens");
  vocab["ab"] = 97;  // the id of the byte "a"
  const auto message = vocab_error(vocab.dump());
  EXPECT_MESSAGE(message, "id 97 is also the id of");
}

TEST_F(Gpt2Files, VocabTokenOutsideByteAlphabet) {
  auto vocab = good_vocab();
  vocab.erase("ab");
  vocab["a b"] = 256;  // a literal space: GPT-2 spells the space byte as U+0120
  EXPECT_MESSAGE(vocab_error(vocab.dump()),
                 "token \"a b\" has the character U+0020, which is outside GPT-2's byte alphabet");
}

TEST_F(Gpt2Files, VocabNeedsEveryByte) {
  auto vocab = good_vocab();
  vocab.erase("A");
  vocab["<|endoftext|>"] = 65;  // keep the ids contiguous
  vocab["ab"] = 256;
  EXPECT_MESSAGE(vocab_error(vocab.dump()), "bad.json: has no token for the single byte 0x41");
}

TEST_F(Gpt2Files, VocabNeedsEndOfText) {
  auto vocab = good_vocab();
  vocab.erase("<|endoftext|>");
  EXPECT_MESSAGE(vocab_error(vocab.dump()), "bad.json: has no <|endoftext|> token");
}

TEST_F(Gpt2Files, MergeLineShape) {
  EXPECT_MESSAGE(merges_error("#version: 0.2\na b\nab c d\n"),
                 "bad.txt:3: expected two tokens separated by one space, found \"ab c d\"");
  EXPECT_MESSAGE(merges_error("#version: 0.2\n\na b\n"),
                 "bad.txt:2: expected two tokens separated by one space, found \"\"");
  EXPECT_MESSAGE(merges_error("#version: 0.2\nab\n"), "bad.txt:2: expected two tokens");
}

TEST_F(Gpt2Files, MergeTokensMustBeInTheVocabulary) {
  EXPECT_MESSAGE(merges_error("#version: 0.2\na b\nab ab\n"),
                 "bad.txt:3: the merged token \"abab\" is not in the vocabulary");
  EXPECT_MESSAGE(merges_error("#version: 0.2\nabc d\n"),
                 "bad.txt:2: token \"abc\" is not in the vocabulary");
}

TEST_F(Gpt2Files, MergeRepeated) {
  EXPECT_MESSAGE(merges_error("#version: 0.2\na b\na b\n"),
                 "bad.txt:3: the merge \"a b\" repeats line 2");
}

TEST_F(Gpt2Files, MergesWithoutVersionLineOrFinalNewline) {
  // Only a first line starting with "#version" is a header; the last line may lack a newline.
  test::write_file(dir_ / "plain.txt", "a b");
  EXPECT_EQ(load_error(good_.vocab_file, dir_ / "plain.txt"), "");
}

TEST(TokenizerFactory, KnowsGpt2AndNamesWhatIsMissing) {
  test::ScratchDir dir;
  const auto files = test::write_small_vocab(dir, {}, {});
  const auto tokenizer =
      make_tokenizer("GPT2BPETokenizer", {files.vocab_file.string(), files.merge_file.string()});
  EXPECT_EQ(tokenizer->type_name(), "GPT2BPETokenizer");
  EXPECT_EQ(tokenizer->eod(), 256);
  EXPECT_THROW(make_tokenizer("GPT2BPETokenizer", {files.vocab_file.string(), ""}), UsageError);
  try {
    make_tokenizer("SentencePiece", {});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown tokenizer type 'SentencePiece'; supported: GPT2BPETokenizer, "
                 "BertWordPieceLowerCase, BertWordPieceCase, GPTSentencePieceTokenizer, "
                 "SentencePieceTokenizer, NullTokenizer");
  }
}

}  // namespace
}  // namespace megatron
