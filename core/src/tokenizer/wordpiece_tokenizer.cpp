// WordPieceTokenizer: basic tokens through WordPiece, special ids, and Megatron's detokenize.
#include "megatron/tokenizer/wordpiece_tokenizer.h"

#include "megatron/error.h"
#include "tokenizer/python_text.h"
#include "tokenizer/wordpiece_basic.h"
#include "tokenizer/wordpiece_match.h"
#include "tokenizer/wordpiece_vocab.h"

namespace megatron {

namespace {

// Python's str.replace: every non-overlapping occurrence, left to right. Byte-wise is the same as
// character-wise here because the patterns are ASCII, which never occurs inside a UTF-8 sequence.
void replace_all(std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t begin = 0;
  for (std::size_t at; (at = text.find(from, begin)) != std::string::npos; begin = at + from.size())
    out.append(text, begin, at - begin).append(to);
  if (begin == 0) return;
  out.append(text, begin);
  text = std::move(out);
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(const std::filesystem::path& vocab_file, Case letter_case,
                                       std::int64_t vocab_extra_ids)
    : vocab_(
          std::make_unique<wordpiece::Vocab>(wordpiece::load_vocab(vocab_file, vocab_extra_ids))),
      case_(letter_case) {}

WordPieceTokenizer::~WordPieceTokenizer() = default;

std::string_view WordPieceTokenizer::type_name() const {
  return case_ == Case::lower ? "BertWordPieceLowerCase" : "BertWordPieceCase";
}

std::size_t WordPieceTokenizer::vocab_size() const {
  return vocab_->tokens.size();
}

TokenId WordPieceTokenizer::eod() const {
  return vocab_->eos;
}

void WordPieceTokenizer::encode(std::string_view text, std::vector<TokenId>& ids) const {
  std::vector<std::size_t> boundaries;
  wordpiece::basic_tokenize(text, case_ == Case::lower, [&](std::string_view word) {
    wordpiece::append_word_pieces(*vocab_, word, boundaries, ids);
  });
}

std::string WordPieceTokenizer::decode(std::span<const TokenId> ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text.push_back(' ');
    text += token_of(ids[i]);
  }
  replace_all(text, " ##", "");
  text = std::string(python::strip(text));
  // clean_up_tokenization, in Megatron's order.
  for (const auto& [from, to] : {std::pair<std::string_view, std::string_view>{" .", "."},
                                 {" ?", "?"},
                                 {" !", "!"},
                                 {" ,", ","},
                                 {" ' ", "'"},
                                 {" n't", "n't"},
                                 {" 'm", "'m"},
                                 {" 's", "'s"},
                                 {" 've", "'ve"},
                                 {" 're", "'re"}})
    replace_all(text, from, to);
  return text;
}

const std::string& WordPieceTokenizer::token_of(TokenId id) const {
  if (id < 0 || std::size_t(id) >= vocab_->tokens.size()) {
    throw Error(std::string(type_name()) + ": id " + std::to_string(id) +
                " is outside the vocabulary (0.." + std::to_string(vocab_->tokens.size() - 1) +
                ")");
  }
  return vocab_->tokens[std::size_t(id)];
}

std::string WordPieceTokenizer::id_to_token(TokenId id) const {
  return token_of(id);
}

std::optional<TokenId> WordPieceTokenizer::special_token(SpecialToken role) const {
  switch (role) {
    case SpecialToken::cls:
      return vocab_->cls;
    case SpecialToken::sep:
      return vocab_->sep;
    case SpecialToken::pad:
      return vocab_->pad;
    case SpecialToken::mask:
      return vocab_->mask;
    case SpecialToken::bos:
      return vocab_->bos;
    case SpecialToken::eos:
      return vocab_->eos;
  }
  return std::nullopt;
}

std::vector<TokenId> WordPieceTokenizer::additional_special_token_ids() const {
  return vocab_->extra_ids;
}

std::optional<TokenId> WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = vocab_->ids.find(token);
  if (it == vocab_->ids.end()) return std::nullopt;
  return it->second;
}

}  // namespace megatron
