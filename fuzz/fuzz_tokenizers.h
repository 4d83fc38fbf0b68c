// The tokenizers the fuzz targets use, made from the repository's bundled vocabularies.
#pragma once

#include <memory>

#include "megatron/tokenizer/tokenizer.h"

namespace megatron::fuzz {

inline const Tokenizer& gpt2_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(
      "GPT2BPETokenizer", {MEGATRON_FUZZ_DATA "/encoder.json", MEGATRON_FUZZ_DATA "/vocab.bpe"});
  return *tokenizer;
}

inline const Tokenizer& wordpiece_tokenizer(bool lower_case) {
  static const std::unique_ptr<Tokenizer> lower = make_tokenizer(
      "BertWordPieceLowerCase", {MEGATRON_FUZZ_DATA "/bert-base-uncased-vocab.txt", ""});
  static const std::unique_ptr<Tokenizer> cased =
      make_tokenizer("BertWordPieceCase", {MEGATRON_FUZZ_DATA "/bert-base-uncased-vocab.txt", ""});
  return lower_case ? *lower : *cased;
}

}  // namespace megatron::fuzz
