// Python str whitespace for UTF-8 text (megatron/tasks/python_text.h).
#include "megatron/tasks/python_text.h"

namespace megatron::tasks {

std::size_t python_space_at(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u;
  };
  const unsigned c = byte(pos);
  // ASCII: \t \n \v \f \r, the separators 0x1c-0x1f and space.
  if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
  // U+0085 and U+00A0.
  if (c == 0xc2 && (byte(pos + 1) == 0x85 || byte(pos + 1) == 0xa0)) return 2;
  // U+1680.
  if (c == 0xe1 && byte(pos + 1) == 0x9a && byte(pos + 2) == 0x80) return 3;
  if (c == 0xe2) {
    const unsigned b1 = byte(pos + 1), b2 = byte(pos + 2);
    // U+2000..U+200A, U+2028, U+2029, U+202F.
    if (b1 == 0x80 && ((b2 >= 0x80 && b2 <= 0x8a) || b2 == 0xa8 || b2 == 0xa9 || b2 == 0xaf))
      return 3;
    if (b1 == 0x81 && b2 == 0x9f) return 3;  // U+205F
  }
  if (c == 0xe3 && byte(pos + 1) == 0x80 && byte(pos + 2) == 0x80) return 3;  // U+3000
  return 0;
}

std::string_view python_strip(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t n = python_space_at(text, begin);
    if (n == 0) break;
    begin += n;
  }
  // From the end: find the last non-space character by scanning forward (UTF-8 widths vary).
  std::size_t end = begin, pos = begin;
  while (pos < text.size()) {
    const std::size_t n = python_space_at(text, pos);
    if (n == 0) {
      ++pos;
      end = pos;
    } else {
      pos += n;
    }
  }
  return text.substr(begin, end - begin);
}

std::vector<std::string_view> python_split(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t pos = 0, start = std::string_view::npos;
  while (pos < text.size()) {
    const std::size_t n = python_space_at(text, pos);
    if (n == 0) {
      if (start == std::string_view::npos) start = pos;
      ++pos;
      continue;
    }
    if (start != std::string_view::npos) out.push_back(text.substr(start, pos - start));
    start = std::string_view::npos;
    pos += n;
  }
  if (start != std::string_view::npos) out.push_back(text.substr(start));
  return out;
}

}  // namespace megatron::tasks
