// Megatron's wikitext_detokenizer (tasks/zeroshot_gpt/detokenizer.py): undoes WikiText-103's
// tokenisation (" @-@ ", spaced punctuation and brackets, "= = =" headings) before the text is
// BPE-encoded, rule for rule in Megatron's order.
#pragma once

#include <string>
#include <string_view>

namespace megatron::wikitext {

std::string wikitext_detokenize(std::string_view text);

}  // namespace megatron::wikitext
