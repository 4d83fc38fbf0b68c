// NullTokenizer: ids as decimal text.
#include "megatron/tokenizer/null_tokenizer.h"

#include <charconv>

#include "megatron/error.h"

namespace megatron {

NullTokenizer::NullTokenizer(std::int64_t vocab_size) : vocab_size_(vocab_size) {
  if (vocab_size < 1 || vocab_size > (std::int64_t{1} << 31) - 1) {
    throw Error("NullTokenizer: vocab_size " + std::to_string(vocab_size) +
                " must be a positive 32-bit id count");
  }
}

void NullTokenizer::check(TokenId id) const {
  if (id < 0 || id >= vocab_size_) {
    throw Error("NullTokenizer: id " + std::to_string(id) + " outside the vocabulary of " +
                std::to_string(vocab_size_));
  }
}

void NullTokenizer::encode(std::string_view text, std::vector<TokenId>& ids) const {
  // Megatron's text_to_ids: [int(x) for x in text.split(' ')].
  std::size_t start = 0;
  while (true) {
    const std::size_t end = std::min(text.find(' ', start), text.size());
    const std::string_view word = text.substr(start, end - start);
    TokenId id = -1;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (word.empty() || ec != std::errc() || ptr != word.data() + word.size()) {
      throw Error("NullTokenizer: '" + std::string(word) + "' at byte " + std::to_string(start) +
                  " is not an id (text is ids separated by single spaces)");
    }
    check(id);
    ids.push_back(id);
    if (end == text.size()) return;
    start = end + 1;
  }
}

std::string NullTokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    check(ids[i]);
    if (i > 0) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

std::string NullTokenizer::id_to_token(TokenId id) const {
  check(id);
  return std::to_string(id);
}

}  // namespace megatron
