// One JSON line of `megatron-app preprocess` -> token ids, as tools/preprocess_data.py's
// Encoder.encode does; apart from the command so the fuzzer (fuzz/) drives the same code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megatron/tokenizer/sentence_splitter.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::app {

// One key's document: its tokens and the length of each of its sentences (sequences).
struct KeyDocument {
  std::vector<TokenId> tokens;
  std::vector<std::int64_t> lengths;
};

struct EncodedLine {
  std::string problem;                 // why the line is bad; empty for a good line
  std::vector<KeyDocument> documents;  // one per --json-keys entry
};

// Tokenizes the values of `json_keys` in one line of loose JSON, each sentence on its own, empty
// ones dropped, EOD appended to the last sentence of a non-empty document when `append_eod`.
// `splitter` (may be null) splits string values into sentences (--split-sentences). A line that is
// not a JSON object, lacks a key or holds a value of the wrong type comes back with `problem` set;
// tokenizers' errors on a value do too. Never throws for any content of `line`.
EncodedLine encode_line(const std::string& line, const std::vector<std::string>& json_keys,
                        bool append_eod, const Tokenizer& tokenizer,
                        const SentenceSplitter* splitter);

}  // namespace megatron::app
