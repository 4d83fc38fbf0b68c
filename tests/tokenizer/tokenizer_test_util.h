// Helpers for the tokenizer tests: file I/O, scratch directories, GPT-2-spelled vocab files.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include "common/scratch_dir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/gpt2_byte_map.h"
#include "tokenizer/utf8.h"

namespace megatron::test {

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream contents;
  contents << in.rdbuf();
  return std::move(contents).str();
}

inline void write_file(const std::filesystem::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

using ScratchDir = megatron::testing::ScratchDir;

// GPT-2's printable spelling of raw bytes, as encoder.json and vocab.bpe write tokens.
inline std::string gpt2_spelling(const std::string& bytes) {
  static constexpr auto map = gpt2::byte_to_code_point();
  std::string out;
  for (const char c : bytes)
    utf8::append(out, map[static_cast<unsigned char>(c)]);
  return out;
}

// A byte-level vocabulary: ids 0..255 are the single bytes, then `extra` tokens (raw bytes) in
// order, then <|endoftext|>; merges are pairs of raw byte strings in rank order.
struct SmallVocab {
  std::filesystem::path vocab_file, merge_file;
  int first_extra_id = 256;
};

inline SmallVocab write_small_vocab(
    const ScratchDir& dir, const std::vector<std::string>& extra,
    const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b)
    vocab[gpt2_spelling(std::string(1, char(b)))] = b;
  int id = 256;
  for (const auto& token : extra)
    vocab[gpt2_spelling(token)] = id++;
  vocab["<|endoftext|>"] = id;
  std::string merge_text = "#version: 0.2\n";
  for (const auto& [left, right] : merges)
    merge_text += gpt2_spelling(left) + " " + gpt2_spelling(right) + "\n";
  SmallVocab files{dir / "vocab.json", dir / "merges.txt"};
  write_file(files.vocab_file, vocab.dump());
  write_file(files.merge_file, merge_text);
  return files;
}

}  // namespace megatron::test
