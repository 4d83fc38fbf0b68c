// WordpieceTokenizer.tokenize of Megatron's bert_tokenization.py, on byte offsets.
#include "tokenizer/wordpiece_match.h"

#include "megatron/error.h"
#include "tokenizer/utf8.h"

namespace megatron::wordpiece {

namespace {

void append_unknown(const Vocab& vocab, std::string_view word, std::vector<TokenId>& ids) {
  if (!vocab.unk) {
    // Megatron fails the same way, with a KeyError on '[UNK]'.
    throw Error("BERT vocab file " + vocab.file + " has no [UNK] token, which the word \"" +
                std::string(word) + "\" needs");
  }
  ids.push_back(*vocab.unk);
}

}  // namespace

void append_word_pieces(const Vocab& vocab, std::string_view word,
                        std::vector<std::size_t>& boundaries, std::vector<TokenId>& ids) {
  // Python slices characters; the byte offset where each code point starts (and the end) lets the
  // loop below do the same on UTF-8.
  boundaries.clear();
  for (std::size_t pos = 0; pos < word.size();) {
    boundaries.push_back(pos);
    if (!utf8::next_code_point(word, pos)) ++pos;  // cannot happen: basic tokens are UTF-8
  }
  const std::size_t chars = boundaries.size();
  boundaries.push_back(word.size());
  if (chars > kMaxInputCharsPerWord) return append_unknown(vocab, word, ids);

  const std::size_t first_piece = ids.size();
  std::size_t start = 0;
  while (start < chars) {
    const StringMap<TokenId>& pieces = start == 0 ? vocab.ids : vocab.continuation_ids;
    const std::size_t longest = start == 0 ? vocab.longest_token : vocab.longest_continuation;
    std::size_t end = chars;
    for (; end > start; --end) {
      const std::size_t bytes = boundaries[end] - boundaries[start];
      if (bytes > longest) continue;  // no token is that long
      const auto it = pieces.find(word.substr(boundaries[start], bytes));
      if (it != pieces.end()) {
        ids.push_back(it->second);
        break;
      }
    }
    if (end == start) {
      ids.resize(first_piece);
      return append_unknown(vocab, word, ids);
    }
    start = end;
  }
}

}  // namespace megatron::wordpiece
