// The immutable tables behind Gpt2BpeTokenizer, read from encoder.json and vocab.bpe.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "megatron/tokenizer/tokenizer.h"
#include "tokenizer/gpt2_pretokenizer.h"
#include "tokenizer/string_hash.h"

namespace megatron::gpt2 {

using StringHash = TransparentStringHash;
using BytesToId = StringMap<TokenId>;

// A merge of two adjacent tokens: its rank (lower merges first) and the token it makes.
struct Merge {
  std::uint32_t rank;
  TokenId merged;
};

constexpr std::uint64_t pair_key(TokenId left, TokenId right) {
  return (std::uint64_t(std::uint32_t(left)) << 32) | std::uint32_t(right);
}

// Tokens are kept as raw bytes rather than GPT-2's printable spelling, so BPE runs on the text's
// own bytes and decoding is a concatenation.
struct BpeTables {
  std::vector<std::string> id_to_bytes;
  BytesToId bytes_to_id;
  std::array<TokenId, 256> byte_token{};            // the id of each single byte
  std::unordered_map<std::uint64_t, Merge> merges;  // pair_key(left, right) -> merge
  TokenId eod = 0;
  PreTokenizer pretokenizer;
};

// Throws Error naming the file and the line (or token) at fault.
void load_vocab(const std::filesystem::path& vocab_file, BpeTables& tables);
void load_merges(const std::filesystem::path& merge_file, BpeTables& tables);

}  // namespace megatron::gpt2
