// BasicTokenizer of Megatron's bert_tokenization.py, on ICU's Unicode properties.
#include "tokenizer/wordpiece_basic.h"

#include <string>

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "megatron/error.h"
#include "tokenizer/python_text.h"
#include "tokenizer/utf8.h"

namespace megatron::wordpiece {

namespace {

std::int8_t category(char32_t c) {
  return u_charType(static_cast<UChar32>(c));
}

const icu::Normalizer2& nfd() {
  static const icu::Normalizer2* const instance = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFDInstance(status);
    if (U_FAILURE(status)) throw Error(std::string("ICU NFD normalizer: ") + u_errorName(status));
    return n;
  }();
  return *instance;
}

// token.lower(), then NFD without Mn characters (_run_strip_accents). ICU's root-locale full
// lowercasing is Python's str.lower(): unconditional SpecialCasing (İ -> i + U+0307) and the
// Final_Sigma context, no language rules.
void lower_and_strip_accents(std::string_view word, std::string& out) {
  out.clear();
  bool ascii = true;
  for (const char c : word)
    ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) {
    // Same result without ICU: ASCII lowercases to ASCII, which NFD leaves alone and has no Mn.
    for (const char c : word)
      out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    return;
  }
  icu::UnicodeString text = icu::UnicodeString::fromUTF8(
      icu::StringPiece(word.data(), static_cast<int32_t>(word.size())));
  text.toLower(icu::Locale::getRoot());
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString decomposed = nfd().normalize(text, status);
  if (U_FAILURE(status)) throw Error(std::string("ICU NFD normalization: ") + u_errorName(status));
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 c = decomposed.char32At(i);
    i += U16_LENGTH(c);
    if (u_charType(c) != U_NON_SPACING_MARK) utf8::append(out, static_cast<char32_t>(c));
  }
}

// _run_split_on_punc: each punctuation character is a token of its own. The final
// whitespace_tokenize would also split at whitespace, which lowercasing and NFD never create;
// splitting there too keeps that step exact.
void split_on_punctuation(std::string_view word,
                          const std::function<void(std::string_view)>& emit) {
  std::size_t piece_begin = 0, pos = 0;
  while (pos < word.size()) {
    const std::size_t char_begin = pos;
    const char32_t c = *utf8::next_code_point(word, pos);  // we wrote `word` ourselves
    const bool punctuation = is_punctuation(c);
    if (punctuation || python::is_space(c)) {
      if (char_begin > piece_begin) emit(word.substr(piece_begin, char_begin - piece_begin));
      if (punctuation) emit(word.substr(char_begin, pos - char_begin));
      piece_begin = pos;
    }
  }
  if (pos > piece_begin) emit(word.substr(piece_begin, pos - piece_begin));
}

}  // namespace

bool is_dropped(char32_t c) {
  if (c == 0 || c == 0xFFFD) return true;
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto type = category(c);
  return type == U_CONTROL_CHAR || type == U_FORMAT_CHAR;
}

bool is_separator(char32_t c) {
  // _clean_text turns space, \t \n \r and Zs into a space, then str.split() splits at Python
  // whitespace: a superset that adds U+2028 and U+2029 (its other members are Cc, dropped first).
  return python::is_space(c);
}

bool is_cjk(char32_t c) {
  // Megatron's _is_chinese_char ranges are exactly these Unicode blocks (later extensions F, G,
  // ... are not included).
  switch (ublock_getCode(static_cast<UChar32>(c))) {
    case UBLOCK_CJK_UNIFIED_IDEOGRAPHS:
    case UBLOCK_CJK_UNIFIED_IDEOGRAPHS_EXTENSION_A:
    case UBLOCK_CJK_UNIFIED_IDEOGRAPHS_EXTENSION_B:
    case UBLOCK_CJK_UNIFIED_IDEOGRAPHS_EXTENSION_C:
    case UBLOCK_CJK_UNIFIED_IDEOGRAPHS_EXTENSION_D:
    case UBLOCK_CJK_UNIFIED_IDEOGRAPHS_EXTENSION_E:
    case UBLOCK_CJK_COMPATIBILITY_IDEOGRAPHS:
    case UBLOCK_CJK_COMPATIBILITY_IDEOGRAPHS_SUPPLEMENT:
      return true;
    default:
      return false;
  }
}

bool is_punctuation(char32_t c) {
  // All non-alphanumeric printable ASCII counts, even $ + < = > ^ ` | ~ which Unicode calls
  // symbols.
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126))
    return true;
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}

void basic_tokenize(std::string_view text, bool lower_case,
                    const std::function<void(std::string_view)>& emit) {
  std::string word, folded;
  const auto finish_word = [&] {
    if (word.empty()) return;
    if (lower_case) {
      lower_and_strip_accents(word, folded);
      split_on_punctuation(folded, emit);
    } else {
      split_on_punctuation(word, emit);
    }
    word.clear();
  };
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t char_begin = pos;
    const auto c = utf8::next_code_point(text, pos);
    if (!c) throw Error("text is not valid UTF-8 at byte " + std::to_string(char_begin));
    if (is_dropped(*c)) continue;
    if (is_separator(*c)) {
      finish_word();
    } else if (is_cjk(*c)) {
      finish_word();
      word.append(text.substr(char_begin, pos - char_begin));
      finish_word();
    } else {
      word.append(text.substr(char_begin, pos - char_begin));
    }
  }
  finish_word();
}

}  // namespace megatron::wordpiece
