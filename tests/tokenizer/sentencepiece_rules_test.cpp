// Megatron's two SentencePiece tokenizer classes, rule by rule: the tokens _SentencePieceTokenizer
// appends and their ids, its splitting at special tokens and its detokenize, what
// _GPTSentencePieceTokenizer exposes, the --tokenizer-type factory and the errors for unusable
// model files. Expected values are derived by hand from Megatron's tokenizer.py (core_v0.13.0);
// the plain SentencePiece ids they are built from are checked against spm_encode in
// sentencepiece_reference_test.cpp.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/expect_error.h"
#include "megatron/error.h"
#include "megatron/tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer_test_util.h"

namespace megatron {
namespace {

using Kind = SentencePieceTokenizer::Kind;

const std::filesystem::path kData = MEGATRON_DATA_DIR;
const std::filesystem::path kModel = kData / "austen_spm.model";
const std::string kSpmTrain = SPM_TRAIN;

std::vector<TokenId> concat(std::initializer_list<std::vector<TokenId>> parts) {
  std::vector<TokenId> out;
  for (const auto& part : parts)
    out.insert(out.end(), part.begin(), part.end());
  return out;
}

// data/austen_spm.model: spm_train's default special pieces <unk> = 0, <s> = 1, </s> = 2 and no
// pad (pad_id -1), then 7997 learned pieces: 8000 in all.
class ShippedModel : public ::testing::Test {
 protected:
  SentencePieceTokenizer gpt_{kModel, Kind::gpt};
  SentencePieceTokenizer special_{kModel, Kind::special_tokens};
  std::vector<TokenId> plain(std::string_view text) const { return gpt_.encode(text); }
};

TEST_F(ShippedModel, GptTypeIsTheModelAsItIs) {
  EXPECT_EQ(gpt_.type_name(), "GPTSentencePieceTokenizer");
  EXPECT_EQ(gpt_.model_piece_count(), 8000u);
  EXPECT_EQ(gpt_.vocab_size(), 8000u);  // len(_vocab): the pieces
  EXPECT_EQ(gpt_.eod(), 2);             // eod is the model's eos_id
  EXPECT_EQ(gpt_.special_token(SpecialToken::eos), 2);
  EXPECT_EQ(gpt_.special_token(SpecialToken::bos), 1);
  // Megatron gives -1 for these (pad_id() of a model without pad; cls/sep/mask always).
  EXPECT_EQ(gpt_.special_token(SpecialToken::pad), std::nullopt);
  EXPECT_EQ(gpt_.special_token(SpecialToken::cls), std::nullopt);
  EXPECT_EQ(gpt_.special_token(SpecialToken::sep), std::nullopt);
  EXPECT_EQ(gpt_.special_token(SpecialToken::mask), std::nullopt);
  EXPECT_TRUE(gpt_.additional_special_token_ids().empty());  // Megatron: None
  EXPECT_EQ(gpt_.id_to_token(0), "<unk>");
  EXPECT_EQ(gpt_.id_to_token(1), "<s>");
  EXPECT_EQ(gpt_.id_to_token(2), "</s>");
  EXPECT_EQ(gpt_.id_to_token(3), "\xE2\x96\x81t");  // "▁t", the first merge (austen_spm.vocab)
}

TEST_F(ShippedModel, GptTypeEncodesSpecialSpellingsAsText) {
  // tokenize is encode_as_ids: "<s>" in the text is text, never the bos id.
  const auto ids = gpt_.encode("a<s>b</s>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 0);
  EXPECT_TRUE(gpt_.encode("").empty());
  EXPECT_EQ(gpt_.decode(gpt_.encode("It is a truth universally acknowledged.")),
            "It is a truth universally acknowledged.");
}

TEST_F(ShippedModel, SpecialTokensTypeAppendsWhatTheModelLacks) {
  // _initalize: <CLS>, <SEP>, <EOD>, <MASK> are new (8000..8003); the model has no pad piece, so
  // id_to_piece(-1) raises IndexError and <PAD> is new (8004); bos and eos are the model's <s>
  // and </s>, already in the vocabulary.
  EXPECT_EQ(special_.type_name(), "SentencePieceTokenizer");
  EXPECT_EQ(special_.model_piece_count(), 8000u);
  EXPECT_EQ(special_.vocab_size(), 8005u);
  EXPECT_EQ(special_.special_token(SpecialToken::cls), 8000);
  EXPECT_EQ(special_.special_token(SpecialToken::sep), 8001);
  EXPECT_EQ(special_.eod(), 8002);  // <EOD>, not the model's eos
  EXPECT_EQ(special_.special_token(SpecialToken::mask), 8003);
  EXPECT_EQ(special_.special_token(SpecialToken::pad), 8004);
  EXPECT_EQ(special_.special_token(SpecialToken::bos), 1);
  EXPECT_EQ(special_.special_token(SpecialToken::eos), 2);
  EXPECT_TRUE(special_.additional_special_token_ids().empty());
  const std::vector<std::string> appended = {"<CLS>", "<SEP>", "<EOD>", "<MASK>", "<PAD>"};
  for (std::size_t i = 0; i < appended.size(); ++i)
    EXPECT_EQ(special_.id_to_token(static_cast<TokenId>(8000 + i)), appended[i]);
  EXPECT_EQ(special_.id_to_token(7999), gpt_.id_to_token(7999));
}

TEST_F(ShippedModel, SpecialTokensTypeSplitsAtEverySpecialToken) {
  // tokenize: the text between special tokens is encoded on its own, each special token is its
  // id; the model's own <s> and </s> count as special tokens too.
  EXPECT_EQ(special_.encode("Hello<EOD>world"), concat({plain("Hello"), {8002}, plain("world")}));
  EXPECT_EQ(special_.encode("a<s>b</s>"), concat({plain("a"), {1}, plain("b"), {2}}));
  EXPECT_EQ(special_.encode("<CLS><SEP><PAD><MASK>"),
            (std::vector<TokenId>{8000, 8001, 8004, 8003}));
  // The earliest occurrence wins whatever the order of the special tokens.
  EXPECT_EQ(special_.encode("x <MASK> y <CLS> z"),
            concat({plain("x "), {8003}, plain(" y "), {8000}, plain(" z")}));
  // A spelling that is cut short is text; the search goes on after it.
  EXPECT_EQ(special_.encode("<SEP<SEP>"), concat({plain("<SEP"), {8001}}));
  EXPECT_EQ(special_.encode("<EOD><EOD>"), (std::vector<TokenId>{8002, 8002}));
  EXPECT_TRUE(special_.encode("").empty());
  // Lowercase is not a special token.
  EXPECT_EQ(special_.encode("<eod>"), plain("<eod>"));
}

TEST_F(ShippedModel, SpecialTokensTypeDetokenizesAsMegatron) {
  // detokenize: decode_ids(run) + " " + token + " " for each special id, then the last run.
  EXPECT_EQ(special_.decode(std::vector<TokenId>{8002}), " <EOD> ");
  EXPECT_EQ(special_.decode(concat({plain("Hello"), {8002}, plain("world")})), "Hello <EOD> world");
  EXPECT_EQ(special_.decode(concat({{1}, plain("Emma"), {2}})), " <s> Emma </s> ");
  EXPECT_EQ(special_.decode(plain("Mr. Darcy")), "Mr. Darcy");
  EXPECT_EQ(gpt_.decode(std::vector<TokenId>{}), "");
}

TEST_F(ShippedModel, ExtraIdsComeLast) {
  const SentencePieceTokenizer t5(kModel, Kind::special_tokens, 3);
  EXPECT_EQ(t5.additional_special_token_ids(), (std::vector<TokenId>{8005, 8006, 8007}));
  EXPECT_EQ(t5.vocab_size(), 8008u);
  EXPECT_EQ(t5.id_to_token(8007), "<extra_id_2>");
  EXPECT_EQ(t5.encode("a<extra_id_1>"), concat({plain("a"), {8006}}));
  // <extra_id_3> is not one of them: text.
  EXPECT_EQ(t5.encode("<extra_id_3>"), plain("<extra_id_3>"));
}

TEST_F(ShippedModel, RefusesIdsOutsideTheVocabularyAndInvalidUtf8) {
  testing::expect_error_message([&] { special_.decode(std::vector<TokenId>{8005}); },
                                "SentencePieceTokenizer: id 8005 is outside the vocabulary "
                                "(0..8004)");
  testing::expect_error_message([&] { gpt_.decode(std::vector<TokenId>{-1}); },
                                "GPTSentencePieceTokenizer: id -1 is outside the vocabulary "
                                "(0..7999)");
  testing::expect_error_message([&] { gpt_.id_to_token(8000); },
                                "GPTSentencePieceTokenizer: id 8000 is outside the vocabulary "
                                "(0..7999)");
  testing::expect_error_message([&] { gpt_.encode("ab\xC3("); },
                                "text is not valid UTF-8 at byte 2");
  testing::expect_error_message([&] { special_.encode("\xFF"); },
                                "text is not valid UTF-8 at byte 0");
}

TEST(SentencePieceFactory, BuildsBothTypesFromTokenizerModel) {
  TokenizerFiles files;
  files.tokenizer_model = kModel.string();
  files.vocab_extra_ids = 2;
  const auto gpt = make_tokenizer("GPTSentencePieceTokenizer", files);
  EXPECT_EQ(gpt->type_name(), "GPTSentencePieceTokenizer");
  EXPECT_EQ(gpt->vocab_size(), 8000u);  // --vocab-extra-ids is not passed to it, as in Megatron
  const auto special = make_tokenizer("SentencePieceTokenizer", files);
  EXPECT_EQ(special->type_name(), "SentencePieceTokenizer");
  EXPECT_EQ(special->vocab_size(), 8007u);
  EXPECT_TRUE(is_sentencepiece_tokenizer_type("SentencePieceTokenizer"));
  EXPECT_TRUE(is_sentencepiece_tokenizer_type("GPTSentencePieceTokenizer"));
  EXPECT_FALSE(is_sentencepiece_tokenizer_type("Llama2Tokenizer"));
}

TEST(SentencePieceFactory, NeedsTokenizerModel) {
  for (const char* type : {"GPTSentencePieceTokenizer", "SentencePieceTokenizer"}) {
    TokenizerFiles files;
    files.vocab_file = kModel.string();  // the wrong option does not stand in for it
    try {
      make_tokenizer(type, files);
      ADD_FAILURE() << "expected a UsageError";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string(type) + " needs --tokenizer-model (a SentencePiece .model file)");
    }
  }
}

class SentencePieceFiles : public ::testing::Test {
 protected:
  test::ScratchDir dir_;
};

TEST_F(SentencePieceFiles, RefusesUnusableModelFilesNamingThem) {
  const auto missing = dir_ / "no-such.model";
  testing::expect_error_message(
      [&] { SentencePieceTokenizer(missing, Kind::gpt); },
      "SentencePiece model file " + missing.string() + ": cannot open: No such file or directory");
  testing::expect_error_message(
      [&] { SentencePieceTokenizer(dir_.path(), Kind::special_tokens); },
      "SentencePiece model file " + dir_.path().string() + ": is a directory");
  const auto garbage = dir_ / "garbage.model";
  test::write_file(garbage, "this is not a protobuf message \xFF\xFF\xFF\xFF\n");
  testing::expect_error_message([&] { SentencePieceTokenizer(garbage, Kind::gpt); },
                                "SentencePiece model file " + garbage.string() +
                                    ": not a SentencePiece model (the bytes do not parse as its "
                                    "protobuf ModelProto)");
  // An empty file is an empty (valid) protobuf message; the library then finds no <unk>.
  const auto empty = dir_ / "empty.model";
  test::write_file(empty, "");
  try {
    SentencePieceTokenizer(empty, Kind::special_tokens);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind(
            "SentencePiece model file " + empty.string() + ": not a SentencePiece model (", 0),
        0u)
        << e.what();
  }
  testing::expect_error_message([&] { SentencePieceTokenizer(kModel, Kind::special_tokens, -1); },
                                "vocab_extra_ids must not be negative, got -1");
}

// Models with other special pieces, trained here by spm_train on a few lines.
class TrainedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kSpmTrain.empty() || !std::filesystem::exists(kSpmTrain)) {
      GTEST_SKIP() << "spm_train not found (Debian package sentencepiece, which "
                      "scripts/install-deps.sh test installs); models with other special pieces "
                      "are not tested";
    }
    test::write_file(dir_ / "text.txt", "the cat sat on the mat\nthe dog ate the hat\nx y z\n");
  }
  std::filesystem::path train(const std::string& name, const std::string& options) {
    const std::string command = "cd '" + dir_.path().string() + "' && '" + kSpmTrain +
                                "' --input=text.txt --model_prefix=" + name +
                                " --model_type=bpe --vocab_size=30 --character_coverage=1.0 "
                                "--num_threads=1 --minloglevel=2 " +
                                options + " > " + name + ".log 2>&1";
    if (std::system(command.c_str()) != 0) {
      throw std::runtime_error("spm_train failed: " + test::read_file(dir_ / (name + ".log")));
    }
    return dir_ / (name + ".model");
  }
  test::ScratchDir dir_;
};

TEST_F(TrainedModel, ModelPadAndUserSymbolsAreUsedAndBosIsAppended) {
  // <unk> 0, </s> 1, pad 2 spelled "<CLS>x", no bos, the user-defined symbol <MASK> 3.
  const auto model = train("m",
                           "--unk_id=0 --eos_id=1 --pad_id=2 '--pad_piece=<CLS>x' --bos_id=-1 "
                           "'--user_defined_symbols=<MASK>'");
  const SentencePieceTokenizer gpt(model, Kind::gpt);
  const SentencePieceTokenizer special(model, Kind::special_tokens);
  const auto n = static_cast<TokenId>(gpt.model_piece_count());
  ASSERT_EQ(gpt.id_to_token(2), "<CLS>x");
  ASSERT_EQ(gpt.id_to_token(3), "<MASK>");

  EXPECT_EQ(gpt.vocab_size(), std::size_t(n));
  EXPECT_EQ(gpt.eod(), 1);
  EXPECT_EQ(gpt.special_token(SpecialToken::pad), 2);
  EXPECT_EQ(gpt.special_token(SpecialToken::bos), std::nullopt);  // Megatron: bos_id() = -1
  EXPECT_EQ(gpt.special_token(SpecialToken::eos), 1);

  // <CLS> n, <SEP> n + 1, <EOD> n + 2; <MASK> is the model's 3 and the pad piece its 2; no bos
  // piece, so <BOS> is n + 3; eos is the model's </s>.
  EXPECT_EQ(special.vocab_size(), std::size_t(n) + 4);
  EXPECT_EQ(special.special_token(SpecialToken::cls), n);
  EXPECT_EQ(special.special_token(SpecialToken::sep), n + 1);
  EXPECT_EQ(special.eod(), n + 2);
  EXPECT_EQ(special.special_token(SpecialToken::mask), 3);
  EXPECT_EQ(special.special_token(SpecialToken::pad), 2);
  EXPECT_EQ(special.special_token(SpecialToken::bos), n + 3);
  EXPECT_EQ(special.special_token(SpecialToken::eos), 1);
  EXPECT_EQ(special.id_to_token(n + 3), "<BOS>");

  // "<CLS>" and "<CLS>x" both start at 0: <CLS> was added first, so it wins (Python's min over
  // the dict keeps the first of equal offsets), and the x is text.
  EXPECT_EQ(special.encode("<CLS>xy"), concat({{n}, gpt.encode("xy")}));
  EXPECT_EQ(special.encode("the<CLS>x"), concat({gpt.encode("the"), {n}, gpt.encode("x")}));
  EXPECT_EQ(special.encode("cat<BOS>"), concat({gpt.encode("cat"), {n + 3}}));
  EXPECT_EQ(special.encode("cat</s>hat"), concat({gpt.encode("cat"), {1}, gpt.encode("hat")}));
  EXPECT_EQ(special.decode(std::vector<TokenId>{2, n + 3}), " <CLS>x  <BOS> ");
}

TEST_F(TrainedModel, WithoutEosTheGptTypeHasNoEndOfDocument) {
  const auto model = train("noeos", "--eos_id=-1");
  // Megatron's eod would be -1, appended after every document; refused instead.
  testing::expect_error_message(
      [&] { SentencePieceTokenizer(model, Kind::gpt); },
      "SentencePiece model file " + model.string() +
          ": the model has no eos piece (eos_id is -1), which GPTSentencePieceTokenizer uses as "
          "its end-of-document token");
  // _SentencePieceTokenizer appends <EOS> (and <PAD>) instead.
  const SentencePieceTokenizer special(model, Kind::special_tokens);
  const auto n = static_cast<TokenId>(special.model_piece_count());
  EXPECT_EQ(special.special_token(SpecialToken::pad), n + 4);
  EXPECT_EQ(special.special_token(SpecialToken::bos), 1);
  EXPECT_EQ(special.special_token(SpecialToken::eos), n + 5);
  EXPECT_EQ(special.id_to_token(n + 5), "<EOS>");
  EXPECT_EQ(special.vocab_size(), std::size_t(n) + 6);
}

}  // namespace
}  // namespace megatron
