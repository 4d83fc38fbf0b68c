// Megatron's SentencePiece tokenizers (SentencePieceTokenizer, GPTSentencePieceTokenizer).
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

// Whether `type` is one of the --tokenizer-type names this class implements (they read
// --tokenizer-model rather than --vocab-file).
bool is_sentencepiece_tokenizer_type(std::string_view type);

// A SentencePiece .model file (Debian's libsentencepiece) used as Megatron-LM's tokenizer.py uses
// it; ids are the library's EncodeAsIds, the same as `spm_encode --output_format=id` and Python's
// encode_as_ids.
//
// Kind::gpt is _GPTSentencePieceTokenizer: encode() is the model's ids and nothing else,
// vocab_size() the model's piece count, eod() the model's eos id; pad/bos/eos are the model's ids
// and cls/sep/mask are absent (Megatron returns -1 for them and for a pad/bos the model lacks,
// which is nullopt here).
//
// Kind::special_tokens is _SentencePieceTokenizer: after the model's pieces it appends, in this
// order and only when the model has no piece of that spelling, <CLS>, <SEP>, <EOD>, <MASK>, the
// pad piece (<PAD> when the model has no pad id), the bos piece (<BOS>), the eos piece (<EOS>) and
// <extra_id_0..N-1>. All of them are special tokens: encode() finds them in the text (the earliest
// occurrence first; at one position, the one added first) and emits their ids between the
// model's ids of the text around them. eod() is <EOD>, not the model's eos.
//
// Both are const and safe to call from several threads at once (the loaded model is only read).
class SentencePieceTokenizer final : public Tokenizer {
 public:
  enum class Kind { special_tokens, gpt };  // SentencePieceTokenizer, GPTSentencePieceTokenizer

  // Throws Error naming `model_file` if it cannot be read or is not a SentencePiece model, if
  // Kind::gpt's model has no eos piece (its end-of-document token), and for a negative
  // `vocab_extra_ids` or one given to Kind::gpt (Megatron's class takes none).
  SentencePieceTokenizer(const std::filesystem::path& model_file, Kind kind,
                         std::int64_t vocab_extra_ids = 0);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::string_view type_name() const override;
  std::size_t vocab_size() const override;
  TokenId eod() const override;

  using Tokenizer::encode;
  // Throws Error on invalid UTF-8 (Python's str cannot hold it either).
  void encode(std::string_view text, std::vector<TokenId>& ids) const override;
  // Megatron's detokenize(): Kind::gpt is the model's decode_ids; Kind::special_tokens decodes
  // the runs between special tokens and writes each special token as " <TOKEN> " (so
  // decode([eod]) is " <EOD> ").
  std::string decode(std::span<const TokenId> ids) const override;
  // The model's piece ("▁the"), or the appended token's spelling.
  std::string id_to_token(TokenId id) const override;
  std::optional<TokenId> special_token(SpecialToken role) const override;
  std::vector<TokenId> additional_special_token_ids() const override;

  // The number of pieces in the model file (vocab_size() adds the appended tokens).
  std::size_t model_piece_count() const;

 private:
  struct Model;
  std::unique_ptr<const Model> model_;
};

}  // namespace megatron
