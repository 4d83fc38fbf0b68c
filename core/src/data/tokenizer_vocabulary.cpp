// TokenizerVocabulary: the masked datasets' view of a WordPiece tokenizer.
#include "megatron/data/tokenizer_vocabulary.h"

#include <numeric>
#include <string>

#include "megatron/error.h"

namespace megatron::data {

std::int64_t required_special_token(const Tokenizer& tokenizer, SpecialToken role,
                                    std::string_view name) {
  const std::optional<TokenId> id = tokenizer.special_token(role);
  if (!id) throw Error("the tokenizer has no " + std::string(name) + " token");
  return *id;
}

TokenizerVocabulary::TokenizerVocabulary(const Tokenizer& tokenizer, bool random_replacements) {
  const auto vocab = static_cast<TokenId>(tokenizer.vocab_size());
  std::vector<std::string> strings;
  for (TokenId id = 0; id < vocab; ++id)
    strings.push_back(tokenizer.id_to_token(id));
  continues_word_ = continues_word_table(strings);
  if (random_replacements) {
    token_lookup_.resize(static_cast<std::size_t>(vocab));
    std::iota(token_lookup_.begin(), token_lookup_.end(), 0);
  }
  wordpiece_ = {required_special_token(tokenizer, SpecialToken::cls, "[CLS]"),
                required_special_token(tokenizer, SpecialToken::sep, "[SEP]"),
                required_special_token(tokenizer, SpecialToken::pad, "[PAD]"),
                required_special_token(tokenizer, SpecialToken::mask, "[MASK]"),
                continues_word_,
                token_lookup_};
}

}  // namespace megatron::data
