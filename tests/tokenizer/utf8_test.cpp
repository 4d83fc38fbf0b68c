// UTF-8 helpers: strict reading, and replacement of maximal ill-formed subparts by U+FFFD (the
// Unicode standard's recommended practice, section 3.9, which Python's errors="replace" follows).
#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace megatron {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

TEST(Utf8, ValidTextIsUnchanged) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA4\x96z";  // a é € 🤖 z
  EXPECT_EQ(utf8::replace_invalid(text), text);
}

TEST(Utf8, StandardsExampleOfMaximalSubparts) {
  // Unicode 15, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c
  // FFFD FFFD d (F1 80 80 is one truncated sequence, E1 80 another, C2 a third).
  const std::string bytes = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string r = kReplacement;
  EXPECT_EQ(utf8::replace_invalid(bytes), "a" + r + r + r + "b" + r + "c" + r + r + "d");
}

TEST(Utf8, OverlongSurrogateAndOutOfRangeBytesAreReplacedOneByOne) {
  const std::string r = kReplacement;
  EXPECT_EQ(utf8::replace_invalid("\xC0\xAF"), r + r);                  // overlong "/"
  EXPECT_EQ(utf8::replace_invalid("\xED\xA0\x80"), r + r + r);          // surrogate U+D800
  EXPECT_EQ(utf8::replace_invalid("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(utf8::replace_invalid("\xFF"), r);
  EXPECT_EQ(utf8::replace_invalid("\xF0\x9F\xA4"), r);  // truncated at the end
}

TEST(Utf8, NextCodePointReadsOrRefuses) {
  const std::string text = "\xC4\xA0x\xE0\x80";
  std::size_t pos = 0;
  EXPECT_EQ(utf8::next_code_point(text, pos), char32_t(0x120));
  EXPECT_EQ(pos, 2u);
  EXPECT_EQ(utf8::next_code_point(text, pos), char32_t('x'));
  EXPECT_EQ(utf8::next_code_point(text, pos), std::nullopt);  // E0 80 is overlong
  EXPECT_EQ(pos, 3u);
}

TEST(Utf8, AppendEncodesEveryLength) {
  std::string out;
  for (const char32_t c : {U'A', U'\u00E9', U'\u20AC', U'\U0001F916'})
    utf8::append(out, c);
  EXPECT_EQ(out, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA4\x96");
}

}  // namespace
}  // namespace megatron
