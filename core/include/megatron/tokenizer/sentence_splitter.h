// English sentence splitting for `preprocess --split-sentences`: ICU's sentence rules, shaped to
// look like the output of NLTK punkt, the splitter Megatron-LM's tools/preprocess_data.py uses.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

namespace megatron {

// Splits UTF-8 text with ICU's sentence BreakIterator (Unicode UAX #29 rules, locale en_US),
// wrapped by ICU's FilteredBreakIteratorBuilder so that the abbreviations in ICU's English data
// (151 in ICU 72: "Mr.", "Mrs.", "Ms.", "Prof.", "Capt.", "Col.", "Rev.", "vs.", "a.m.", ...) do
// not end a sentence.
//
// The sentences are shaped as punkt (nltk.tokenize.punkt.PunktSentenceTokenizer) returns them:
// - A line break is whitespace, not a sentence end: ICU ends a sentence at every line break,
//   punkt only after . ? ! (hard-wrapped text such as Project Gutenberg's would otherwise become
//   one "sentence" per line). So CR, LF, NEL, LS and PS are shown to ICU as spaces.
// - No whitespace between sentences: each sentence is trimmed at its end, and every sentence
//   but the first at its start. The first keeps the text's leading whitespace, as punkt's does.
//   Whitespace-only or empty text has no sentences. Whitespace is Python's str.isspace, which
//   punkt's regular expressions and rstrip use.
// - keep_newlines (Megatron's --keep-newlines, which gives punkt CustomLanguageVars): each
//   sentence keeps the whitespace that follows it, line breaks included, except the last one.
//
// How it differs from punkt with Megatron's trained english.pickle model (not a bit-for-bit
// reimplementation; a different splitter):
// - Abbreviations: ICU's fixed list rather than punkt's learned one. "Dr.", "St.", "Jr.", "No.",
//   lower-case "e.g."/"i.e." and initials such as "J." or "C." are not in ICU's list, so
//   "Dr. Grant came." is two sentences here; punkt's model knows such abbreviations.
// - A period, closing quote, then a lower-case word ("Stop." he said.) is one sentence for ICU;
//   punkt splits after the quote.
// - ICU also ends sentences at non-Latin terminators (。 ！ ？ । ...); punkt's English rules know
//   only . ? !
// Thread-safe: split() may be called from several threads at once.
class SentenceSplitter {
 public:
  // Throws Error if ICU cannot build the en_US sentence iterator (missing ICU data).
  explicit SentenceSplitter(bool keep_newlines = false);
  ~SentenceSplitter();
  SentenceSplitter(const SentenceSplitter&) = delete;
  SentenceSplitter& operator=(const SentenceSplitter&) = delete;

  // The sentences of `text`, in order, as views into `text`; none is empty. Throws Error if
  // `text` is not valid UTF-8 (naming the byte offset) or is 2 GiB or longer (ICU's limit).
  std::vector<std::string_view> split(std::string_view text) const;

  bool keep_newlines() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron
