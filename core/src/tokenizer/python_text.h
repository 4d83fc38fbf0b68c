// Python's str.isspace() and str.strip(), which Megatron's BERT tokenizer relies on (str.split()
// on whitespace, vocab lines read with .strip()).
#pragma once

#include <string_view>

namespace megatron::python {

// str.isspace() of one character: bidirectional class WS, B or S, or general category Zs (the
// definition in CPython's makeunicodedata.py), looked up in ICU.
bool is_space(char32_t c);

// str.strip() with no argument: `text` (valid UTF-8) without the Python whitespace at both ends.
std::string_view strip(std::string_view text);

}  // namespace megatron::python
