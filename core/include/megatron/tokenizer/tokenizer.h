// The tokenizer interface used by preprocessing and datasets, and Megatron's vocabulary padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megatron {

using TokenId = std::int32_t;

// The special tokens a dataset may need by role (Megatron's tokenizer.cls, .sep, ... properties).
enum class SpecialToken { cls, sep, pad, mask, bos, eos };

// Encoding and decoding are const and safe to call from several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer();

  // Megatron's --tokenizer-type name, e.g. "GPT2BPETokenizer".
  virtual std::string_view type_name() const = 0;
  // Unpadded: the number of ids the vocabulary file defines.
  virtual std::size_t vocab_size() const = 0;
  // End-of-document id, appended after each document by `preprocess --append-eod`.
  virtual TokenId eod() const = 0;

  // Appends the ids of `text` (UTF-8) to `ids`; throws Error on invalid UTF-8.
  virtual void encode(std::string_view text, std::vector<TokenId>& ids) const = 0;
  std::vector<TokenId> encode(std::string_view text) const;

  // Text of `ids` as the type's Megatron detokenize() gives it (see each type). Throws Error for
  // an id outside the vocabulary.
  virtual std::string decode(std::span<const TokenId> ids) const = 0;

  // The vocabulary's string for one id, as the vocab file spells it (e.g. "##ing", "Ġthe" for
  // GPT-2). Throws Error for an id outside the vocabulary.
  virtual std::string id_to_token(TokenId id) const = 0;

  // The id Megatron's tokenizer gives for `role`, or nullopt where Megatron's tokenizer of this
  // type has none (its property raises NotImplementedError). The default has none.
  virtual std::optional<TokenId> special_token(SpecialToken role) const;

  // Megatron's additional_special_tokens_ids: the <extra_id_N> sentinel ids, in N order (empty by
  // default and without --vocab-extra-ids).
  virtual std::vector<TokenId> additional_special_token_ids() const;
};

// Files named by --vocab-file, --merge-file and --tokenizer-model (which ones a type needs depends
// on the type), and --vocab-extra-ids (the <extra_id_N> sentinels the BERT WordPiece types and
// SentencePieceTokenizer append; GPT2BPETokenizer and GPTSentencePieceTokenizer ignore it, as
// Megatron does).
struct TokenizerFiles {
  std::string vocab_file;
  std::string merge_file;
  std::int64_t vocab_extra_ids = 0;
  // The SentencePiece .model file. Last, with an initializer, so the existing {vocab, merge, extra}
  // initializations stay complete.
  std::string tokenizer_model = {};
  // NullTokenizer's --vocab-size.
  std::int64_t vocab_size = 0;
};

// The tokenizer named by Megatron's --tokenizer-type: GPT2BPETokenizer, BertWordPieceLowerCase,
// BertWordPieceCase, GPTSentencePieceTokenizer, SentencePieceTokenizer, NullTokenizer. Throws UsageError for an
// unknown type or a missing file argument, naming the option, and Error for a file it cannot use.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view type, const TokenizerFiles& files);

// Megatron pads the embedding to a multiple of make_vocab_size_divisible_by x TP so every
// tensor-parallel shard has the same, aligned size: 50257 -> 50304 (TP 1), 51200 (TP 8).
// Throws Error unless all three are positive.
std::int64_t padded_vocab_size(std::int64_t vocab_size, std::int64_t divisible_by = 128,
                               std::int64_t tensor_parallel_size = 1);

}  // namespace megatron
