// Helpers for the tokenizer tests: file I/O, scratch directories, GPT-2-spelled vocab files,
// whole-corpus id hashes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include "common/scratch_dir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "megatron/tokenizer/tokenizer.h"
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

// One line of a corpus_token_hashes.txt: `file n_tokens sha256`.
struct CorpusHash {
  std::string file;
  std::size_t tokens = 0;
  std::string sha256;
};

inline std::vector<CorpusHash> read_corpus_hashes(const std::filesystem::path& path) {
  std::vector<CorpusHash> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    CorpusHash h;
    fields >> h.file >> h.tokens >> h.sha256;
    out.push_back(h);
  }
  return out;
}

// sha256 (by the sha256sum tool) of the ids as uint32 little-endian, written under `dir`.
inline std::string sha256_of_ids(const std::vector<TokenId>& ids, const ScratchDir& dir) {
  std::string bytes;
  for (const TokenId id : ids) {
    const auto v = static_cast<std::uint32_t>(id);
    for (int shift = 0; shift < 32; shift += 8)
      bytes.push_back(static_cast<char>((v >> shift) & 0xFF));
  }
  const auto path = dir / "ids.u32le";
  write_file(path, bytes);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(
      popen(("sha256sum '" + path.string() + "'").c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run sha256sum");
  char digest[65] = {};
  if (std::fread(digest, 1, 64, pipe.get()) != 64) throw std::runtime_error("sha256sum failed");
  return digest;
}

}  // namespace megatron::test
