// Megatron's tasks/data_utils.py for the BERT fine-tuning tasks (RACE, MNLI, QQP): the text
// clean-up, the [CLS] a [SEP] b [SEP] sequences with token types and padding, and the names the
// tasks give their validation sets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/tokenizer/tokenizer.h"

namespace megatron::tasks {

// clean_text: newlines to spaces, whitespace runs (Python's \s) to one space, " . " to ". "
// (three passes).
std::string clean_text(std::string_view text);

// One sequence of a sample (seq_length entries each).
struct TokenSequence {
  std::vector<TokenId> ids;
  std::vector<TokenId> types;          // 0 for [CLS] a [SEP], 1 for b [SEP]; padding: the pad id
  std::vector<std::int32_t> paddings;  // 1 on real tokens, 0 on padding
};

// build_tokens_types_paddings_from_ids: [CLS] a [SEP] (b [SEP]); a sequence that reaches
// seq_length is cut to seq_length - 1 and ends with [SEP]; then padded with [PAD] (types too).
// `b` may be null (no second segment).
TokenSequence build_sequence(const std::vector<TokenId>& a, const std::vector<TokenId>* b,
                             std::int64_t seq_length, TokenId cls, TokenId sep, TokenId pad);

// Python's `text.split(sep)[-1]`: what follows the last `sep` (the whole text without one).
std::string_view after_last(std::string_view text, std::string_view sep);
// Python's `text.strip(chars)`: removes any of `chars` from both ends.
std::string_view strip_chars(std::string_view text, std::string_view chars);

}  // namespace megatron::tasks
