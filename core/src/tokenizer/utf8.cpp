// UTF-8 decoding with Python's replacement rule. Hand-written: the standard library has no UTF-8
// decoder, and what we need (Table 3-7 of the Unicode standard) is a few lines.
#include "tokenizer/utf8.h"

#include <cstdint>

namespace megatron::utf8 {

namespace {

struct Decoded {
  char32_t code_point;
  std::size_t length;  // bytes consumed; on failure, the maximal subpart to replace (>= 1)
  bool ok;
};

// Table 3-7 "Well-Formed UTF-8 Byte Sequences": the allowed range of the second byte depends on
// the lead byte (this excludes overlong forms, surrogates and code points above U+10FFFF).
Decoded decode_at(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(text[pos + i]); };
  const std::uint8_t lead = byte(0);
  if (lead < 0x80) return {lead, 1, true};
  std::size_t length = 0;
  std::uint8_t second_min = 0x80, second_max = 0xBF;
  char32_t value = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, value = lead & 0x0F;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, value = lead & 0x07;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;
  } else {
    return {0, 1, false};
  }
  for (std::size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return {0, i, false};
    const std::uint8_t b = byte(i);
    const std::uint8_t lo = i == 1 ? second_min : 0x80, hi = i == 1 ? second_max : 0xBF;
    if (b < lo || b > hi) return {0, i, false};
    value = (value << 6) | (b & 0x3F);
  }
  return {value, length, true};
}

}  // namespace

std::optional<char32_t> next_code_point(std::string_view text, std::size_t& pos) {
  if (pos >= text.size()) return std::nullopt;
  const Decoded d = decode_at(text, pos);
  if (!d.ok) return std::nullopt;
  pos += d.length;
  return d.code_point;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const Decoded d = decode_at(bytes, pos);
    if (d.ok) {
      out.append(bytes.substr(pos, d.length));
    } else {
      append(out, U'\uFFFD');
    }
    pos += d.length;
  }
  return out;
}

}  // namespace megatron::utf8
