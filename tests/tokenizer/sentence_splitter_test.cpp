// SentenceSplitter: punkt-shaped sentences from ICU's rules. Expected sentences are written by
// hand; where they say "punkt gives", that was checked with NLTK 3.8's PunktSentenceTokenizer.
#include "megatron/tokenizer/sentence_splitter.h"

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "megatron/error.h"

namespace megatron {
namespace {

std::vector<std::string> split(const std::string& text, bool keep_newlines = false) {
  const SentenceSplitter splitter(keep_newlines);
  std::vector<std::string> sentences;
  for (const std::string_view sentence : splitter.split(text))
    sentences.emplace_back(sentence);
  return sentences;
}

using Sentences = std::vector<std::string>;

TEST(SentenceSplitter, TrimsWhitespaceBetweenSentencesAsPunktDoes) {
  // punkt gives exactly this: no whitespace between sentences, none at the end.
  EXPECT_EQ(split("Hello there.  How are you?\n\nFine!  "),
            (Sentences{"Hello there.", "How are you?", "Fine!"}));
  // punkt keeps the text's leading whitespace on the first sentence.
  EXPECT_EQ(split("  Hello there. How?"), (Sentences{"  Hello there.", "How?"}));
  // No-break and ideographic spaces are whitespace too (punkt gives the same).
  EXPECT_EQ(split("One.\u00A0\u3000Two.\u00A0"), (Sentences{"One.", "Two."}));
}

TEST(SentenceSplitter, EmptyAndWhitespaceOnlyTextHaveNoSentences) {
  EXPECT_EQ(split(""), Sentences{});
  EXPECT_EQ(split(" \n\t \r\n"), Sentences{});
  EXPECT_EQ(split(" \n\t ", true), Sentences{});
  EXPECT_EQ(split("No end mark"), (Sentences{"No end mark"}));
}

TEST(SentenceSplitter, LineBreaksAreWhitespaceNotSentenceEnds) {
  // Hard-wrapped text (the bundled Austen chapters): ICU's rules alone would end a sentence at
  // every line break; punkt only at . ? ! (punkt gives the same three results).
  EXPECT_EQ(split("The family of Dashwood had long\nbeen settled in Sussex.  Their estate\nwas "
                  "large."),
            (Sentences{"The family of Dashwood had long\nbeen settled in Sussex.",
                       "Their estate\nwas large."}));
  EXPECT_EQ(split("CHAPTER 1\n\n\nThe family came."),
            (Sentences{"CHAPTER 1\n\n\nThe family came."}));
  EXPECT_EQ(split("One.\r\nTwo\r\nthree.\u2029Four\u2028five\u0085six."),
            (Sentences{"One.", "Two\r\nthree.", "Four\u2028five\u0085six."}));
}

TEST(SentenceSplitter, KeepNewlinesKeepsTheWhitespaceAfterEachSentenceButTheLast) {
  // punkt with Megatron's CustomLanguageVars gives exactly this.
  EXPECT_EQ(split("  Hello there.  How are you?\n\nFine!  ", true),
            (Sentences{"  Hello there.  ", "How are you?\n\n", "Fine!"}));
  EXPECT_EQ(split("First para.\n\nSecond\nline.\n", true),
            (Sentences{"First para.\n\n", "Second\nline."}));
}

TEST(SentenceSplitter, IcuEnglishAbbreviationsDoNotEndSentences) {
  EXPECT_EQ(split("Mr. and Mrs. Dashwood came. Prof. Smith left with Capt. Brown."),
            (Sentences{"Mr. and Mrs. Dashwood came.", "Prof. Smith left with Capt. Brown."}));
  // Not in ICU's list (documented difference from punkt's English model).
  EXPECT_EQ(split("Dr. Grant came."), (Sentences{"Dr.", "Grant came."}));
  // A period before a lower-case word or a digit never ends a sentence.
  EXPECT_EQ(split("They met at St. james, e.g. at noon. It is 3.5 kg. Next."),
            (Sentences{"They met at St. james, e.g. at noon.", "It is 3.5 kg.", "Next."}));
  EXPECT_EQ(split("Wait... what? Really!? Yes."), (Sentences{"Wait... what?", "Really!?", "Yes."}));
}

TEST(SentenceSplitter, ClosingQuotesAndBracketsStayWithTheirSentence) {
  // punkt gives the same for these three.
  EXPECT_EQ(split("He said \"Stop.\" Then left."), (Sentences{"He said \"Stop.\"", "Then left."}));
  EXPECT_EQ(split("\"Yes!\" he said."), (Sentences{"\"Yes!\"", "he said."}));
  EXPECT_EQ(split("Next line here. (Aside.) End"),
            (Sentences{"Next line here.", "(Aside.)", "End"}));
  // punkt gives ["\"Stop.\"", "he said."] (documented difference).
  EXPECT_EQ(split("\"Stop.\" he said."), (Sentences{"\"Stop.\" he said."}));
}

TEST(SentenceSplitter, NonAsciiText) {
  EXPECT_EQ(split("Ünïcödé façade. Naïve café! 🤖 done."),
            (Sentences{"Ünïcödé façade.", "Naïve café!", "🤖 done."}));
  // ICU ends sentences at CJK full stops; punkt's English rules would not.
  EXPECT_EQ(split("日本語です。次の文。 Done."), (Sentences{"日本語です。", "次の文。", "Done."}));
}

TEST(SentenceSplitter, SentencesAreViewsIntoTheText) {
  const std::string text = "One. Two.";
  const SentenceSplitter splitter;
  const auto sentences = splitter.split(text);
  ASSERT_EQ(sentences.size(), 2u);
  EXPECT_EQ(sentences[0].data(), text.data());
  EXPECT_EQ(sentences[1].data(), text.data() + 5);
}

TEST(SentenceSplitter, RefusesInvalidUtf8NamingTheByte) {
  const SentenceSplitter splitter;
  try {
    splitter.split("Fine. \xC3(");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sentence splitter: invalid UTF-8 at byte 6 of the text");
  }
}

TEST(SentenceSplitter, OneSplitterServesSeveralThreads) {
  const SentenceSplitter splitter;
  const std::string text = "Mr. Smith came. He left! Did he? Yes.";
  const std::vector<std::string_view> expected{"Mr. Smith came.", "He left!", "Did he?", "Yes."};
  std::vector<int> matches(4, 0);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i)
          matches[t] += splitter.split(text) == expected;
      });
    }
  }
  EXPECT_EQ(matches, std::vector<int>(4, 50));
}

}  // namespace
}  // namespace megatron
