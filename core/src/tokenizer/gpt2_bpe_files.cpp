// Reads GPT-2's encoder.json (token -> id) and vocab.bpe (ranked merges), checking every entry.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "megatron/error.h"
#include "tokenizer/gpt2_bpe_tables.h"
#include "tokenizer/gpt2_byte_map.h"
#include "tokenizer/utf8.h"

namespace megatron::gpt2 {

namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

std::string read_file(const std::filesystem::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(std::string(what) + " " + path.string() + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw Error(std::string(what) + " " + path.string() + ": read error");
  return std::move(contents).str();
}

std::string json_quoted(std::string_view s) {
  return nlohmann::json(std::string(s)).dump();
}

// GPT-2's printable spelling -> raw bytes; nullopt-like failure reported through `bad`.
bool spelling_to_bytes(std::string_view spelling, std::string& bytes, std::string& bad) {
  bytes.clear();
  std::size_t pos = 0;
  while (pos < spelling.size()) {
    const std::size_t start = pos;
    const auto code_point = utf8::next_code_point(spelling, pos);
    if (!code_point) {
      bad = "is not valid UTF-8 at byte " + std::to_string(start);
      return false;
    }
    const auto byte = code_point_to_byte(*code_point);
    if (!byte) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", unsigned(*code_point));
      bad = std::string("has the character ") + hex + ", which is outside GPT-2's byte alphabet";
      return false;
    }
    bytes.push_back(static_cast<char>(*byte));
  }
  return true;
}

}  // namespace

void load_vocab(const std::filesystem::path& vocab_file, BpeTables& tables) {
  const std::string file = vocab_file.string();
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_file, "GPT-2 vocab file"));
  } catch (const nlohmann::json::parse_error& e) {
    throw Error("GPT-2 vocab file " + file + ": not valid JSON: " + e.what());
  }
  if (!vocab.is_object()) {
    throw Error("GPT-2 vocab file " + file +
                ": expected a JSON object mapping each token to its id, found a " +
                vocab.type_name());
  }
  const std::size_t size = vocab.size();
  tables.id_to_bytes.assign(size, {});
  std::vector<const std::string*> spelling_of(size, nullptr);
  tables.bytes_to_id.reserve(size);
  std::string bytes, bad;
  for (const auto& [spelling, value] : vocab.items()) {
    const std::string where = "GPT-2 vocab file " + file + ": token " + json_quoted(spelling);
    if (!value.is_number_integer()) {
      throw Error(
          where + ": expected an integer id, found " +
          (value.is_number() ? "a non-integer number" : std::string("a ") + value.type_name()));
    }
    const auto id = value.get<std::int64_t>();
    if (id < 0 || std::uint64_t(id) >= size) {
      throw Error(where + ": id " + std::to_string(id) + " is outside 0.." +
                  std::to_string(size - 1) + " (the file has " + std::to_string(size) +
                  " tokens, so ids must be exactly 0..N-1)");
    }
    if (spelling_of[id]) {
      throw Error(where + ": id " + std::to_string(id) + " is also the id of " +
                  json_quoted(*spelling_of[id]));
    }
    if (!spelling_to_bytes(spelling, bytes, bad)) throw Error(where + " " + bad);
    spelling_of[id] = &spelling;
    tables.id_to_bytes[id] = bytes;
    tables.bytes_to_id.emplace(bytes, TokenId(id));
  }
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = tables.bytes_to_id.find(std::string(1, char(b)));
    if (it == tables.bytes_to_id.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw Error("GPT-2 vocab file " + file + ": has no token for the single byte " + hex +
                  " (a byte-level vocabulary needs all 256)");
    }
    tables.byte_token[b] = it->second;
  }
  const auto eod = tables.bytes_to_id.find(kEndOfText);
  if (eod == tables.bytes_to_id.end()) {
    throw Error("GPT-2 vocab file " + file + ": has no " + std::string(kEndOfText) +
                " token (the end-of-document id)");
  }
  tables.eod = eod->second;
}

void load_merges(const std::filesystem::path& merge_file, BpeTables& tables) {
  const std::string file = merge_file.string();
  const std::string text = read_file(merge_file, "GPT-2 merge file");
  std::unordered_map<std::uint64_t, std::size_t> line_of;  // for naming a repeated merge
  std::string left_bytes, right_bytes, bad;
  std::uint32_t rank = 0;
  std::size_t line_number = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    const std::string where = "GPT-2 merge file " + file + ":" + std::to_string(line_number);
    // encoder.py skips the first line, which is "#version: 0.2" in GPT-2's file.
    if (line_number == 1 && line.starts_with("#version")) continue;
    const std::size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      throw Error(where + ": expected two tokens separated by one space, found " +
                  json_quoted(line));
    }
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    if (!spelling_to_bytes(left, left_bytes, bad)) {
      throw Error(where + ": token " + json_quoted(left) + " " + bad);
    }
    if (!spelling_to_bytes(right, right_bytes, bad)) {
      throw Error(where + ": token " + json_quoted(right) + " " + bad);
    }
    const auto id_of = [&](const std::string& bytes, std::string_view spelling, const char* what) {
      const auto it = tables.bytes_to_id.find(bytes);
      if (it == tables.bytes_to_id.end()) {
        throw Error(where + ": " + what + " " + json_quoted(spelling) +
                    " is not in the vocabulary");
      }
      return it->second;
    };
    const TokenId left_id = id_of(left_bytes, left, "token");
    const TokenId right_id = id_of(right_bytes, right, "token");
    const TokenId merged =
        id_of(left_bytes + right_bytes, std::string(left) + std::string(right), "the merged token");
    const std::uint64_t key = pair_key(left_id, right_id);
    const auto [it, inserted] = line_of.emplace(key, line_number);
    if (!inserted) {
      throw Error(where + ": the merge " + json_quoted(line) + " repeats line " +
                  std::to_string(it->second));
    }
    tables.merges.emplace(key, Merge{rank++, merged});
  }
}

}  // namespace megatron::gpt2
