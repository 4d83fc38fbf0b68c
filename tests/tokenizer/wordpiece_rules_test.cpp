// Megatron's BERT tokenization rules, one at a time, on the bert-base-uncased vocabulary (both
// types: there is no cased vocabulary here, so the Case type shows that case and accents are kept
// by mapping them to other ids or [UNK]) and on small hand-made vocabularies.
#include <memory>

#include <gtest/gtest.h>

#include "common/expect_error.h"
#include "megatron/error.h"
#include "megatron/tokenizer/wordpiece_tokenizer.h"
#include "tokenizer/python_text.h"
#include "tokenizer_test_util.h"

namespace megatron {
namespace {

using Tokens = std::vector<std::string>;

const std::filesystem::path kVocab =
    std::filesystem::path(MEGATRON_DATA_DIR) / "bert-base-uncased-vocab.txt";

Tokens tokens_of(const WordPieceTokenizer& tokenizer, std::string_view text) {
  Tokens out;
  for (const TokenId id : tokenizer.encode(text))
    out.push_back(tokenizer.id_to_token(id));
  return out;
}

class BertRules : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    lower_ = std::make_unique<WordPieceTokenizer>(kVocab, WordPieceTokenizer::Case::lower);
    keep_ = std::make_unique<WordPieceTokenizer>(kVocab, WordPieceTokenizer::Case::keep);
  }
  static void TearDownTestSuite() {
    lower_.reset();
    keep_.reset();
  }
  static Tokens lower(std::string_view text) { return tokens_of(*lower_, text); }
  static Tokens keep(std::string_view text) { return tokens_of(*keep_, text); }
  static std::unique_ptr<WordPieceTokenizer> lower_, keep_;
};
std::unique_ptr<WordPieceTokenizer> BertRules::lower_, BertRules::keep_;

TEST_F(BertRules, LowerCaseFoldsCaseAndAccentsCaseKeepsThem) {
  EXPECT_EQ(keep_->type_name(), "BertWordPieceCase");
  EXPECT_EQ(lower("Héllo WORLD"), (Tokens{"hello", "world"}));
  EXPECT_EQ(keep("Héllo WORLD"), (Tokens{"[UNK]", "[UNK]"}));  // the vocab is lowercase only
  EXPECT_EQ(keep("hello world"), (Tokens{"hello", "world"}));
  EXPECT_EQ(lower("café naïve Zürich"), (Tokens{"cafe", "naive", "zurich"}));
  EXPECT_EQ(keep("naïve"), (Tokens{"[UNK]"}));  // the vocab has no ï
  EXPECT_EQ(lower("Ünïcödé"), (Tokens{"unicode"}));
  // Accents are the Mn characters after NFD, precomposed or not; a word of marks alone vanishes.
  EXPECT_EQ(lower("A\xCC\x81"), (Tokens{"a"}));
  EXPECT_EQ(keep("a\xCC\x81"), (Tokens{"[UNK]"}));
  EXPECT_EQ(lower("x \xCC\x81 y"), (Tokens{"x", "y"}));
}

TEST_F(BertRules, LowercasingIsPythonsStrLower) {
  // Full, context-sensitive lowercasing: a capital sigma at the end of a word becomes final
  // sigma (a per-character mapping would give "σ", so "##ο", "##σ").
  EXPECT_EQ(lower("ΟΔΟΣ"), (Tokens{"ο", "##δ", "##ος"}));
  EXPECT_EQ(lower("ΣΟΣ"), (Tokens{"σ", "##ος"}));
  EXPECT_EQ(lower("ΟΣ-ΟΣ"), (Tokens{"ο", "##ς", "-", "ο", "##ς"}));  // lowered before the split
  // İ lowercases to i + U+0307, whose mark accent stripping then removes.
  EXPECT_EQ(lower("İstanbul"), (Tokens{"istanbul"}));
  // ß has no lowercase change; uppercase SS is two letters.
  EXPECT_EQ(lower("straße"), (Tokens{"st", "##raße"}));
  EXPECT_EQ(lower("STRASSE"), (Tokens{"st", "##ras", "##se"}));
}

TEST_F(BertRules, ControlCharactersAreDroppedInsideWords) {
  // NUL, U+FFFD and Cc/Cf characters vanish without splitting the word, even \v and U+0085
  // (which Python calls whitespace) and U+200B.
  for (const std::string_view text :
       {std::string("hel\0lo", 6), std::string("hel\xEF\xBF\xBDlo"), std::string("hel\vlo"),
        std::string("hel\xC2\x85lo"), std::string("hel\xE2\x80\x8Blo")}) {
    EXPECT_EQ(lower(text), (Tokens{"hello"})) << text;
  }
  EXPECT_EQ(lower("hel\tlo"), (Tokens{"he", "##l", "lo"}));
  // Megatron drops only Cc and Cf: a private-use character (Co) stays and spoils the word.
  EXPECT_EQ(lower("hel\xEE\x80\x80lo"), (Tokens{"[UNK]"}));
}

TEST_F(BertRules, WhitespaceSplitsWords) {
  // No-break space, ideographic space (Zs) and U+2028 (Python whitespace, Zl).
  for (const std::string text : {"hello\xC2\xA0world", "hello\xE3\x80\x80world",
                                 "hello\xE2\x80\xA8world", " \n\r\thello  \t world\n"}) {
    EXPECT_EQ(lower(text), (Tokens{"hello", "world"})) << text;
  }
}

TEST_F(BertRules, CjkIdeographsStandAlone) {
  EXPECT_EQ(lower("中文"), (Tokens{"中", "文"}));
  EXPECT_EQ(keep("abc中def"), (Tokens{"abc", "中", "def"}));
  // Kana are not in the CJK blocks: the word stays whole and WordPiece splits it.
  EXPECT_EQ(lower("テキストと"), (Tokens{"テ", "##キ", "##ス", "##ト", "##と"}));
  // Block edges: U+4DBF is the last of extension A, U+4DC0 a hexagram symbol; U+2CEAF the last
  // of extension E, U+2CEB0 the first of extension F (not in Megatron's list); U+F900 a
  // compatibility ideograph.
  EXPECT_EQ(lower("a\xE4\xB6\xBF"
                  "b"),
            (Tokens{"a", "[UNK]", "b"}));
  EXPECT_EQ(lower("a\xE4\xB7\x80"
                  "b"),
            (Tokens{"[UNK]"}));
  EXPECT_EQ(lower("a\xF0\xAC\xBA\xAF"
                  "b"),
            (Tokens{"a", "[UNK]", "b"}));
  EXPECT_EQ(lower("a\xF0\xAC\xBA\xB0"
                  "b"),
            (Tokens{"[UNK]"}));
  EXPECT_EQ(lower("a\xEF\xA4\x80"
                  "b"),
            (Tokens{"a", "[UNK]", "b"}));
}

TEST_F(BertRules, PunctuationIsSplitOff) {
  // ASCII symbols count ($ ^ _), as does Unicode P* (¿ — “ ” · §) ...
  EXPECT_EQ(lower("a$b"), (Tokens{"a", "$", "b"}));
  EXPECT_EQ(lower("a^b"), (Tokens{"a", "^", "b"}));
  EXPECT_EQ(lower("a_b"), (Tokens{"a", "_", "b"}));
  EXPECT_EQ(lower("a¿b"), (Tokens{"a", "¿", "b"}));
  EXPECT_EQ(lower("a—b"), (Tokens{"a", "—", "b"}));
  EXPECT_EQ(lower("a“b”"), (Tokens{"a", "“", "b", "”"}));
  EXPECT_EQ(lower("a·b§c"), (Tokens{"a", "·", "b", "§", "c"}));
  // ... but non-ASCII symbols (So ©, Sc €) are word characters.
  EXPECT_EQ(lower("a©b"), (Tokens{"a", "##©", "##b"}));
  EXPECT_EQ(keep("a€b"), (Tokens{"a", "##€", "##b"}));
}

TEST_F(BertRules, WordsOverTwoHundredCodePointsAreUnknown) {
  const auto repeat = [](std::string_view unit, int n) {
    std::string out;
    for (int i = 0; i < n; ++i)
      out += unit;
    return out;
  };
  const Tokens two_hundred = lower(repeat("a", 200));
  ASSERT_EQ(two_hundred.size(), 100u);
  EXPECT_EQ(two_hundred.front(), "aaa");
  EXPECT_EQ(lower(repeat("a", 201)), (Tokens{"[UNK]"}));
  // Code points, not bytes: 200 two-byte sigmas still split.
  const Tokens sigmas = keep(repeat("σ", 200));
  ASSERT_EQ(sigmas.size(), 200u);
  EXPECT_EQ(sigmas.front(), "σ");
  EXPECT_EQ(sigmas.back(), "##σ");
  EXPECT_EQ(keep(repeat("σ", 201)), (Tokens{"[UNK]"}));
  // Counted after accent stripping: 200 É (400 code points in NFD) are 200 e.
  const Tokens es = lower(repeat("É", 200));
  ASSERT_FALSE(es.empty());
  EXPECT_EQ(es.front(), "ee");
}

// A vocabulary file with the four required specials, [UNK] (unless told not to), then `tokens`.
std::filesystem::path small_vocab(const test::ScratchDir& dir, const Tokens& tokens,
                                  bool with_unk = true) {
  std::string text =
      with_unk ? "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" : "[PAD]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const auto& token : tokens)
    text += token + "\n";
  const auto path = dir / "vocab.txt";
  test::write_file(path, text);
  return path;
}

TEST(WordPieceMatch, GreedyLongestMatchFirst) {
  test::ScratchDir dir;
  const WordPieceTokenizer tokenizer(
      small_vocab(dir, {"un", "unaff", "##aff", "##able", "##ab", "##le", "##a", "x"}),
      WordPieceTokenizer::Case::lower);
  // The longest prefix wins even where a shorter one would also cover the word.
  EXPECT_EQ(tokens_of(tokenizer, "unaffable"), (Tokens{"unaff", "##able"}));
  EXPECT_EQ(tokens_of(tokenizer, "unable"), (Tokens{"un", "##able"}));
  EXPECT_EQ(tokens_of(tokenizer, "unaa"), (Tokens{"un", "##a", "##a"}));
  // Continuations only match "##" entries: "x" cannot continue a word.
  EXPECT_EQ(tokens_of(tokenizer, "unx x"), (Tokens{"[UNK]", "x"}));
  // One position without a match makes the whole word [UNK], not just its tail.
  EXPECT_EQ(tokens_of(tokenizer, "unaffablez"), (Tokens{"[UNK]"}));
  EXPECT_EQ(tokens_of(tokenizer, "!"), (Tokens{"[UNK]"}));
}

TEST(WordPieceMatch, UnknownWordWithoutUnkTokenIsAnError) {
  test::ScratchDir dir;
  const auto path = small_vocab(dir, {"known"}, false);
  const WordPieceTokenizer tokenizer(path, WordPieceTokenizer::Case::lower);
  EXPECT_EQ(tokens_of(tokenizer, "Known"), (Tokens{"known"}));
  testing::expect_error_message(
      [&] { tokenizer.encode("known unknown"); },
      "BERT vocab file " + path.string() + " has no [UNK] token, which the word \"unknown\" needs");
}

TEST(PythonText, IsSpaceIsPythonsStrIsspace) {
  // Python 3.11: "".join(c for c in map(chr, range(0x110000)) if c.isspace())
  const std::u32string python_spaces =
      U"\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
      U"\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";
  std::u32string found;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c < 0xE000) continue;
    if (python::is_space(c)) found.push_back(c);
  }
  EXPECT_TRUE(found == python_spaces) << "found " << found.size() << " whitespace code points";
}

TEST(PythonText, StripRemovesPythonWhitespaceAtBothEnds) {
  EXPECT_EQ(python::strip(" \t\xC2\xA0[CLS]\xE3\x80\x80\r"), "[CLS]");
  EXPECT_EQ(python::strip("a b"), "a b");
  EXPECT_EQ(python::strip("\xE2\x80\x8B"
                          "a"),
            "\xE2\x80\x8B"
            "a");  // U+200B is not whitespace
  EXPECT_EQ(python::strip("  "), "");
  EXPECT_EQ(python::strip(""), "");
}

}  // namespace
}  // namespace megatron
