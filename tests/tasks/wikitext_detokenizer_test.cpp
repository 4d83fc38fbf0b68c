// Megatron's wikitext_detokenizer rule by rule (tasks/zeroshot_gpt/detokenizer.py), and Python's
// str whitespace helpers the task code depends on.
#include <gtest/gtest.h>

#include "megatron/tasks/python_text.h"
#include "wikitext_detokenizer.h"

namespace megatron {
namespace {

using wikitext::wikitext_detokenize;

TEST(WikitextDetokenizer, NumberSeparatorsAndPunctuation) {
  EXPECT_EQ(wikitext_detokenize("a 2 @.@ 4 @-@ mile road , costing £ 1 @,@ 250 ; done . Yes ! "
                                "No ? Well : ok"),
            "a 2.4-mile road, costing £ 1,250; done. Yes! No? Well: ok");
}

TEST(WikitextDetokenizer, BracketsAndQuotesLoseInnerSpaces) {
  EXPECT_EQ(wikitext_detokenize("( 3 @.@ 9 km ) [ a ] { b } \" said he \" ' x '"),
            "(3.9 km) [a] {b} \"said he\" 'x'");
  // From an opening bracket to the first closing one, nested openers included; an opener without
  // a closer stays as it is.
  EXPECT_EQ(wikitext_detokenize("( a ( b ) c )"), "(a ( b) c )");
  EXPECT_EQ(wikitext_detokenize("( never closed"), "( never closed");
  // Quotes pair up left to right.
  EXPECT_EQ(wikitext_detokenize("\" a \" b \" c \""), "\"a\" b \"c\"");
}

TEST(WikitextDetokenizer, HeadingsContractionsAndMisc) {
  EXPECT_EQ(wikitext_detokenize(" = = = Lime trees = = = \n"), " === Lime trees ===\n");
  EXPECT_EQ(wikitext_detokenize(" = = History = = \n = Title = \n"), " == History ==\n= Title =\n");
  // "s '" closes the contraction, and then the quote rule pairs it with the next quote.
  EXPECT_EQ(wikitext_detokenize("the girls ' books , John 's hat"), "the girls'books, John's hat");
  EXPECT_EQ(wikitext_detokenize("John 's hat"), "John's hat");
  EXPECT_EQ(wikitext_detokenize("it was 20 \xc2\xb0 C , N of"),
            "it was 20\xc2\xb0"
            "C, 1 of");
  EXPECT_EQ(wikitext_detokenize("a N b"), "a 1 b");
  // Megatron's re.sub(r"/' [0-9]/", r"/'[0-9]/") replaces the match with that literal text.
  EXPECT_EQ(wikitext_detokenize("x/' 5/y /' a/"), "x/'[0-9]/y /' a/");
}

TEST(PythonText, WhitespaceAsPythonStrDefinesIt) {
  using tasks::python_split;
  using tasks::python_strip;
  EXPECT_EQ(python_strip(" \t\n a b \xc2\xa0\r\n"), "a b");  // NBSP is whitespace to Python
  EXPECT_EQ(python_strip("   "), "");
  EXPECT_EQ(python_strip("\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");  // é is not
  const auto words = python_split("  one\ttwo\xe3\x80\x80three \n");  // U+3000 separates
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[0], "one");
  EXPECT_EQ(words[1], "two");
  EXPECT_EQ(words[2], "three");
  EXPECT_TRUE(python_split(" \n ").empty());
}

}  // namespace
}  // namespace megatron
