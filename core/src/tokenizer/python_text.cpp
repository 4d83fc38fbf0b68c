// Python's notion of whitespace, from ICU's Unicode properties.
#include "tokenizer/python_text.h"

#include <unicode/uchar.h>

#include "tokenizer/utf8.h"

namespace megatron::python {

bool is_space(char32_t c) {
  const auto code_point = static_cast<UChar32>(c);
  if (u_charType(code_point) == U_SPACE_SEPARATOR) return true;
  const UCharDirection direction = u_charDirection(code_point);
  return direction == U_WHITE_SPACE_NEUTRAL || direction == U_BLOCK_SEPARATOR ||
         direction == U_SEGMENT_SEPARATOR;
}

std::string_view strip(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t next = begin;
    const auto c = utf8::next_code_point(text, next);
    if (!c || !is_space(*c)) break;
    begin = next;
  }
  std::size_t end = text.size();
  while (end > begin) {
    std::size_t start = end - 1;  // back up to the lead byte of the last code point
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
      --start;
    std::size_t next = start;
    const auto c = utf8::next_code_point(text, next);
    if (!c || next != end || !is_space(*c)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

}  // namespace megatron::python
