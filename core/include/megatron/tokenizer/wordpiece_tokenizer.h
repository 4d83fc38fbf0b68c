// Megatron's BERT WordPiece tokenizers (BertWordPieceLowerCase, BertWordPieceCase).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/tokenizer/tokenizer.h"

namespace megatron {

namespace wordpiece {
struct Vocab;
}

// Google's BERT tokenization as Megatron-LM runs it (bert_tokenization.py FullTokenizer inside
// tokenizer.py's _BertWordPieceTokenizer):
// - basic tokens: drop NUL, U+FFFD and Cc/Cf characters (but \t \n \r), split at whitespace, put
//   each CJK ideograph on its own, with Case::lower lowercase (Python's str.lower()) and strip
//   accents (NFD, drop Mn), then split off each punctuation character (ASCII non-alphanumerics
//   and Unicode P*);
// - WordPiece: greedy longest match, "##" continuations; a word of more than 200 code points or
//   one that cannot be covered becomes [UNK].
// No [CLS]/[SEP] are added by encode(). Megatron appends [BOS], [EOS] (when the file lacks them)
// and <extra_id_0..N-1> (--vocab-extra-ids N) after the file's tokens; vocab_size() counts them
// and eod() is [EOS].
class WordPieceTokenizer final : public Tokenizer {
 public:
  enum class Case { lower, keep };  // BertWordPieceLowerCase, BertWordPieceCase

  // `vocab_file` has one token per line, id = line number (counted from 0). Throws Error naming
  // the file if it cannot be read, is not UTF-8, repeats a token or lacks [CLS], [SEP], [PAD] or
  // [MASK]; and for a negative `vocab_extra_ids`.
  WordPieceTokenizer(const std::filesystem::path& vocab_file, Case letter_case,
                     std::int64_t vocab_extra_ids = 0);
  ~WordPieceTokenizer() override;
  WordPieceTokenizer(const WordPieceTokenizer&) = delete;
  WordPieceTokenizer& operator=(const WordPieceTokenizer&) = delete;

  std::string_view type_name() const override;
  std::size_t vocab_size() const override;
  TokenId eod() const override;  // [EOS], as Megatron's eod property

  using Tokenizer::encode;
  // Throws Error on invalid UTF-8, or if a word needs [UNK] and the vocabulary has none (Megatron
  // raises KeyError there).
  void encode(std::string_view text, std::vector<TokenId>& ids) const override;
  // Megatron's detokenize(): the tokens joined by spaces, " ##" removed, the ends stripped, then
  // " ." " ?" " !" " ," " ' " " n't" " 'm" " 's" " 've" " 're" lose their space. Not the inverse
  // of encode: case, accents and spacing are lost.
  std::string decode(std::span<const TokenId> ids) const override;
  std::string id_to_token(TokenId id) const override;
  std::optional<TokenId> special_token(SpecialToken role) const override;
  std::vector<TokenId> additional_special_token_ids() const override;

  // The id of a vocabulary string (including the appended ones), or nullopt.
  std::optional<TokenId> token_to_id(std::string_view token) const;

 private:
  const std::string& token_of(TokenId id) const;  // throws Error outside the vocabulary

  std::unique_ptr<const wordpiece::Vocab> vocab_;
  Case case_;
};

}  // namespace megatron
