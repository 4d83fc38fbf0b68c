// Megatron's NullTokenizer (megatron/core/tokenizers/text/libraries/null_tokenizer.py): text is
// space-separated ids, the vocabulary is just its size (--vocab-size), the end of document is
// its last id. For benchmarks, synthetic data and sizing a model whose real tokenizer is absent.
#pragma once

#include <cstdint>

#include "megatron/tokenizer/tokenizer.h"

namespace megatron {

class NullTokenizer : public Tokenizer {
 public:
  // Throws Error unless vocab_size is at least 1.
  explicit NullTokenizer(std::int64_t vocab_size);

  std::string_view type_name() const override { return "NullTokenizer"; }
  std::size_t vocab_size() const override { return static_cast<std::size_t>(vocab_size_); }
  TokenId eod() const override { return static_cast<TokenId>(vocab_size_ - 1); }
  using Tokenizer::encode;
  // "3 17 42" -> 3, 17, 42; throws Error for anything but non-negative ids below the vocabulary
  // size separated by single spaces.
  void encode(std::string_view text, std::vector<TokenId>& ids) const override;
  std::string decode(std::span<const TokenId> ids) const override;
  std::string id_to_token(TokenId id) const override;

 private:
  void check(TokenId id) const;
  std::int64_t vocab_size_;
};

}  // namespace megatron
