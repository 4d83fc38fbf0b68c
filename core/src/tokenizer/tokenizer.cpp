// The Tokenizer base, the --tokenizer-type factory and Megatron's vocabulary padding.
#include "megatron/tokenizer/tokenizer.h"

#include "megatron/error.h"
#include "megatron/tokenizer/gpt2_bpe_tokenizer.h"
#include "megatron/tokenizer/null_tokenizer.h"
#include "megatron/tokenizer/sentencepiece_tokenizer.h"
#include "megatron/tokenizer/wordpiece_tokenizer.h"

namespace megatron {

Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text) const {
  std::vector<TokenId> ids;
  encode(text, ids);
  return ids;
}

std::optional<TokenId> Tokenizer::special_token(SpecialToken) const {
  return std::nullopt;
}

std::vector<TokenId> Tokenizer::additional_special_token_ids() const {
  return {};
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view type, const TokenizerFiles& files) {
  if (type == "GPT2BPETokenizer") {
    if (files.vocab_file.empty()) throw UsageError("GPT2BPETokenizer needs --vocab-file");
    if (files.merge_file.empty()) throw UsageError("GPT2BPETokenizer needs --merge-file");
    return std::make_unique<Gpt2BpeTokenizer>(files.vocab_file, files.merge_file);
  }
  if (type == "BertWordPieceLowerCase" || type == "BertWordPieceCase") {
    if (files.vocab_file.empty()) throw UsageError(std::string(type) + " needs --vocab-file");
    return std::make_unique<WordPieceTokenizer>(files.vocab_file,
                                                type == "BertWordPieceLowerCase"
                                                    ? WordPieceTokenizer::Case::lower
                                                    : WordPieceTokenizer::Case::keep,
                                                files.vocab_extra_ids);
  }
  if (is_sentencepiece_tokenizer_type(type)) {
    if (files.tokenizer_model.empty()) {
      throw UsageError(std::string(type) +
                       " needs --tokenizer-model (a SentencePiece .model file)");
    }
    // As in Megatron, only SentencePieceTokenizer takes --vocab-extra-ids.
    if (type == "GPTSentencePieceTokenizer") {
      return std::make_unique<SentencePieceTokenizer>(files.tokenizer_model,
                                                      SentencePieceTokenizer::Kind::gpt);
    }
    return std::make_unique<SentencePieceTokenizer>(
        files.tokenizer_model, SentencePieceTokenizer::Kind::special_tokens, files.vocab_extra_ids);
  }
  if (type == "NullTokenizer") {
    if (files.vocab_size < 1) throw UsageError("NullTokenizer needs --vocab-size");
    return std::make_unique<NullTokenizer>(files.vocab_size);
  }
  throw UsageError("unknown tokenizer type '" + std::string(type) +
                   "'; supported: GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, "
                   "GPTSentencePieceTokenizer, SentencePieceTokenizer, NullTokenizer");
}

std::int64_t padded_vocab_size(std::int64_t vocab_size, std::int64_t divisible_by,
                               std::int64_t tensor_parallel_size) {
  if (vocab_size <= 0 || divisible_by <= 0 || tensor_parallel_size <= 0) {
    throw Error("padded_vocab_size: vocab size (" + std::to_string(vocab_size) +
                "), make_vocab_size_divisible_by (" + std::to_string(divisible_by) +
                ") and tensor-parallel size (" + std::to_string(tensor_parallel_size) +
                ") must all be positive");
  }
  const std::int64_t multiple = divisible_by * tensor_parallel_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

}  // namespace megatron
