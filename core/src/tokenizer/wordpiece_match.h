// WordPiece: greedy longest-match-first splitting of one basic token into vocabulary pieces.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "megatron/tokenizer/tokenizer.h"
#include "tokenizer/wordpiece_vocab.h"

namespace megatron::wordpiece {

// Megatron's max_input_chars_per_word: longer words (in code points) become [UNK] whole.
constexpr std::size_t kMaxInputCharsPerWord = 200;

// Appends the ids of `word` (valid UTF-8, no whitespace): the longest vocabulary prefix, then the
// longest "##" continuation from where it ended, and so on; [UNK] alone if some position has no
// match. `boundaries` is scratch. Throws Error if [UNK] is needed and the vocab has none.
void append_word_pieces(const Vocab& vocab, std::string_view word,
                        std::vector<std::size_t>& boundaries, std::vector<TokenId>& ids);

}  // namespace megatron::wordpiece
