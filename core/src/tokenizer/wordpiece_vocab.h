// The vocabulary of Megatron's BERT WordPiece tokenizers: one token per line, id = line number,
// then the [BOS], [EOS] and <extra_id_N> tokens Megatron appends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "megatron/tokenizer/tokenizer.h"
#include "tokenizer/string_hash.h"

namespace megatron::wordpiece {

struct Vocab {
  std::string file;                 // for error messages
  std::vector<std::string> tokens;  // by id
  StringMap<TokenId> ids;           // every token -> its id
  // For each "##piece" token, "piece" -> its id, so a continuation is looked up without building
  // "##" + piece.
  StringMap<TokenId> continuation_ids;
  std::size_t longest_token = 0;         // bytes; no longer substring can match
  std::size_t longest_continuation = 0;  // bytes after "##"
  TokenId cls = 0, sep = 0, pad = 0, mask = 0, bos = 0, eos = 0;
  // Megatron looks [UNK] up only when a word needs it, so a vocab without one still loads.
  std::optional<TokenId> unk;
  std::vector<TokenId> extra_ids;  // <extra_id_0>, <extra_id_1>, ...
};

// Reads the file as Megatron's load_vocab does (UTF-8; lines end at \n, \r\n or \r; each line is
// stripped of Python whitespace), then appends [BOS], [EOS] and <extra_id_0..extra_ids-1> where
// absent. Throws Error naming the file when it cannot be read, a line is not UTF-8, a token repeats
// or [CLS], [SEP], [PAD] or [MASK] is missing, and for a negative `extra_ids`.
Vocab load_vocab(const std::filesystem::path& vocab_file, std::int64_t extra_ids);

}  // namespace megatron::wordpiece
