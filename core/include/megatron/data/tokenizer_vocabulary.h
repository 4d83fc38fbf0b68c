// The WordPieceVocabulary (masked_samples.h) of a tokenizer, as the BERT and T5 datasets (and
// their tests) build it: the "##" table, BERT's random-replacement ids and the special tokens.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "megatron/data/masked_samples.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::data {

// The id of `role`, or a megatron::Error "the tokenizer has no <name> token".
std::int64_t required_special_token(const Tokenizer& tokenizer, SpecialToken role,
                                    std::string_view name);

// A tokenizer's WordPieceVocabulary together with the tables its spans point into: movable
// (the tables' buffers move along), not copyable.
class TokenizerVocabulary {
 public:
  TokenizerVocabulary() = default;
  // continues_word from every id's string; token_lookup every id in vocabulary order when
  // `random_replacements` (BERT's 80/10/10), else empty (T5 always masks with [MASK]). Throws
  // required_special_token's Error for the first of [CLS], [SEP], [PAD], [MASK] missing.
  TokenizerVocabulary(const Tokenizer& tokenizer, bool random_replacements);

  TokenizerVocabulary(TokenizerVocabulary&&) = default;
  TokenizerVocabulary& operator=(TokenizerVocabulary&&) = default;
  TokenizerVocabulary(const TokenizerVocabulary&) = delete;
  TokenizerVocabulary& operator=(const TokenizerVocabulary&) = delete;

  const WordPieceVocabulary& wordpiece() const { return wordpiece_; }

 private:
  std::vector<std::uint8_t> continues_word_;
  std::vector<std::int64_t> token_lookup_;
  WordPieceVocabulary wordpiece_;
};

}  // namespace megatron::data
