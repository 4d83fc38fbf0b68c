// GPT-2's reversible map from bytes to printable code points, in which encoder.json and vocab.bpe
// spell their tokens.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace megatron::gpt2 {

// Bytes 33-126, 161-172 and 174-255 stand for themselves; the other 68 bytes map, in increasing
// byte order, to U+0100, U+0101, ... (encoder.py's bytes_to_unicode).
constexpr std::array<char32_t, 256> byte_to_code_point() {
  std::array<char32_t, 256> table{};
  char32_t next_extra = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    table[b] = printable ? char32_t(b) : next_extra++;
  }
  return table;
}

// The inverse: the byte a code point stands for, or nullopt outside the 256-character alphabet.
inline std::optional<std::uint8_t> code_point_to_byte(char32_t c) {
  static constexpr std::array<std::int16_t, 512> inverse = [] {
    std::array<std::int16_t, 512> table{};
    table.fill(-1);
    const auto forward = byte_to_code_point();
    for (unsigned b = 0; b < 256; ++b)
      table[forward[b]] = static_cast<std::int16_t>(b);
    return table;
  }();
  if (c >= inverse.size() || inverse[c] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(inverse[c]);
}

}  // namespace megatron::gpt2
