// UTF-8 decoding helpers for the tokenizers: strict code-point reading and lossy decoding.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace megatron::utf8 {

// Reads the code point starting at `pos` and advances `pos` past it; nullopt (pos unchanged) if
// the bytes there are not a well-formed UTF-8 sequence.
std::optional<char32_t> next_code_point(std::string_view text, std::size_t& pos);

void append(std::string& out, char32_t code_point);

// Copies `bytes`, replacing each maximal ill-formed subsequence by U+FFFD (Unicode's
// "substitution of maximal subparts", which is what Python's errors="replace" does).
std::string replace_invalid(std::string_view bytes);

}  // namespace megatron::utf8
