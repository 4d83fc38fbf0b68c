// GPT-2 byte-level BPE (Megatron's GPT2BPETokenizer): the ids of OpenAI's encoder.py.
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

namespace gpt2 {
struct BpeTables;
}

// Text is split by GPT-2's pre-tokenizer regex, each piece's UTF-8 bytes are merged by the BPE
// ranks of the merges file, and the resulting byte strings are looked up in the vocabulary.
// `<|endoftext|>` is the eod id; text containing that literal string is encoded as plain text.
// Each thread keeps a bounded cache of recently encoded pieces.
class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // `vocab_file` is encoder.json (token -> id), `merge_file` vocab.bpe ("#version" line, then one
  // "a b" merge per line, rank = order). Throws Error naming the file, the line (or token) and
  // what is wrong.
  Gpt2BpeTokenizer(const std::filesystem::path& vocab_file,
                   const std::filesystem::path& merge_file);
  ~Gpt2BpeTokenizer() override;
  Gpt2BpeTokenizer(const Gpt2BpeTokenizer&) = delete;
  Gpt2BpeTokenizer& operator=(const Gpt2BpeTokenizer&) = delete;

  std::string_view type_name() const override { return "GPT2BPETokenizer"; }
  std::size_t vocab_size() const override;
  TokenId eod() const override;

  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<TokenId>& ids) const override;
  // Byte sequences that are not valid UTF-8 become U+FFFD, as Python's
  // bytes.decode("utf-8", errors="replace") does.
  std::string decode(std::span<const TokenId> ids) const override;
  // GPT-2's printable-unicode spelling, as in encoder.json ("Ġthe").
  std::string id_to_token(TokenId id) const override;
  // special_token() keeps the default (none): Megatron's GPT2BPETokenizer exposes only eod;
  // its cls/sep/pad/mask/bos/eos raise NotImplementedError.

  // The raw bytes a token stands for (not GPT-2's printable-unicode spelling).
  std::string_view token_bytes(TokenId id) const;
  // The id of a token given in GPT-2's printable-unicode spelling (as in encoder.json).
  std::optional<TokenId> token_to_id(std::string_view token) const;

 private:
  std::unique_ptr<const gpt2::BpeTables> tables_;
  std::uint64_t instance_id_;  // tells a thread's cache which tokenizer filled it
};

}  // namespace megatron
