// SentenceSplitter: ICU's en_US sentence iterator with ICU's English abbreviation suppressions,
// its segments trimmed into punkt-shaped sentences.
#include "megatron/tokenizer/sentence_splitter.h"

#include <unicode/brkiter.h>
#include <unicode/filteredbrk.h>
#include <unicode/uchar.h>
#include <unicode/utext.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>

#include "megatron/error.h"
#include "tokenizer/utf8.h"

namespace megatron {

namespace {

void check_icu(UErrorCode status, const char* what) {
  if (U_FAILURE(status)) {
    throw Error(std::string("sentence splitter: ICU cannot ") + what +
                " for en_US: " + u_errorName(status));
  }
}

// Python's str.isspace, which punkt's \s and rstrip use: Unicode White_Space plus the
// information separators U+001C..U+001F (bidirectional class B/S, which Python counts too).
bool is_python_space(char32_t c) {
  return u_isUWhiteSpace(UChar32(c)) || (c >= 0x1C && c <= 0x1F);
}

// The text as ICU should see it: line breaks become spaces of the same UTF-8 length (so ICU's
// offsets are offsets into the original), because punkt treats a line break as whitespace while
// UAX #29 ends a sentence at each one. Also validates the UTF-8.
std::string without_line_breaks(std::string_view text) {
  std::string shown(text);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t start = pos;
    const auto c = utf8::next_code_point(text, pos);
    if (!c) {
      throw Error("sentence splitter: invalid UTF-8 at byte " + std::to_string(start) +
                  " of the text");
    }
    if (*c == U'\n' || *c == U'\r') {
      shown[start] = ' ';
    } else if (*c == 0x85) {
      shown.replace(start, 2, "\u00A0");  // NEL -> no-break space (both 2 bytes)
    } else if (*c == 0x2028 || *c == 0x2029) {
      shown.replace(start, 3, "\u2000");  // LS, PS -> en quad (all 3 bytes)
    }
  }
  return shown;
}

std::string_view trim_start(std::string_view s) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t next = pos;
    if (!is_python_space(*utf8::next_code_point(s, next))) break;
    pos = next;
  }
  return s.substr(pos);
}

std::string_view trim_end(std::string_view s) {
  std::size_t end = 0;  // just past the last non-space code point
  for (std::size_t pos = 0; pos < s.size();) {
    if (!is_python_space(*utf8::next_code_point(s, pos))) end = pos;
  }
  return s.substr(0, end);
}

}  // namespace

struct SentenceSplitter::Impl {
  bool keep_newlines = false;
  // Guards clone() only: each split() iterates its own clone, as ICU iterators are not
  // thread-safe (ICU's own advice for concurrent use).
  std::mutex prototype_mutex;
  std::unique_ptr<icu::BreakIterator> prototype;

  std::unique_ptr<icu::BreakIterator> iterator() {
    const std::lock_guard lock(prototype_mutex);
    std::unique_ptr<icu::BreakIterator> copy(prototype->clone());
    if (!copy) throw Error("sentence splitter: ICU cannot copy the sentence iterator");
    return copy;
  }
};

SentenceSplitter::SentenceSplitter(bool keep_newlines) : impl_(std::make_unique<Impl>()) {
  impl_->keep_newlines = keep_newlines;
  const icu::Locale locale("en_US");
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::BreakIterator> rules(
      icu::BreakIterator::createSentenceInstance(locale, status));
  check_icu(status, "create the sentence break iterator");
  std::unique_ptr<icu::FilteredBreakIteratorBuilder> suppressions(
      icu::FilteredBreakIteratorBuilder::createInstance(locale, status));
  check_icu(status, "load the sentence-break suppressions (abbreviations)");
  // wrapIteratorWithFilter adopts `rules`, also when it fails.
  impl_->prototype.reset(suppressions->wrapIteratorWithFilter(rules.release(), status));
  check_icu(status, "apply the sentence-break suppressions");
}

SentenceSplitter::~SentenceSplitter() = default;

bool SentenceSplitter::keep_newlines() const {
  return impl_->keep_newlines;
}

std::vector<std::string_view> SentenceSplitter::split(std::string_view text) const {
  if (text.size() > std::size_t(std::numeric_limits<std::int32_t>::max())) {
    throw Error("sentence splitter: a text of " + std::to_string(text.size()) +
                " bytes exceeds ICU's limit of 2^31-1 bytes");
  }
  const std::string shown = without_line_breaks(text);
  UErrorCode status = U_ZERO_ERROR;
  // UTF-8 UText: the iterator's offsets are byte offsets, valid in `text` as in `shown`.
  icu::LocalUTextPointer utext(
      utext_openUTF8(nullptr, shown.data(), std::int64_t(shown.size()), &status));
  check_icu(status, "open the text");
  const auto iterator = impl_->iterator();
  iterator->setText(utext.getAlias(), status);
  check_icu(status, "set the text");

  std::vector<std::string_view> sentences;
  std::int32_t start = iterator->first();
  for (std::int32_t end = iterator->next(); end != icu::BreakIterator::DONE;
       start = end, end = iterator->next()) {
    std::string_view sentence = text.substr(std::size_t(start), std::size_t(end - start));
    if (start != 0) sentence = trim_start(sentence);
    const bool last = std::size_t(end) == text.size();
    if (!impl_->keep_newlines || last) sentence = trim_end(sentence);
    if (trim_end(sentence).empty()) continue;  // whitespace only: punkt has no such sentence
    sentences.push_back(sentence);
  }
  return sentences;
}

}  // namespace megatron
