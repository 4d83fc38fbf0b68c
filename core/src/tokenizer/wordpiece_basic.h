// Megatron's BERT BasicTokenizer: text cleaning, CJK spacing, whitespace and punctuation
// splitting, and for the lower-case type lowercasing and accent stripping.
#pragma once

#include <functional>
#include <string_view>

namespace megatron::wordpiece {

// Calls `emit` with each basic token of `text` (UTF-8), in order; the view is valid only during
// the call. With `lower_case`, tokens are lowercased as Python's str.lower() does, then
// NFD-decomposed with the nonspacing marks (Mn) removed. Throws Error if `text` is not valid UTF-8.
void basic_tokenize(std::string_view text, bool lower_case,
                    const std::function<void(std::string_view)>& emit);

// Megatron's character classes (bert_tokenization.py), exposed for the tests.
bool is_dropped(char32_t c);      // NUL, U+FFFD, and Cc/Cf except \t \n \r
bool is_separator(char32_t c);    // space, \t \n \r, Zs, or any other Python whitespace
bool is_cjk(char32_t c);          // the CJK ideograph blocks Megatron surrounds with spaces
bool is_punctuation(char32_t c);  // ASCII 33-47, 58-64, 91-96, 123-126, or P*

}  // namespace megatron::wordpiece
