// Reading and checking a BERT vocab file, and Megatron's appended special tokens.
#include "tokenizer/wordpiece_vocab.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "megatron/error.h"
#include "tokenizer/python_text.h"
#include "tokenizer/utf8.h"

namespace megatron::wordpiece {

namespace {

std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("BERT vocab file " + path.string() + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw Error("BERT vocab file " + path.string() + ": read error");
  return std::move(contents).str();
}

// Python's text-mode readline() with universal newlines: a line ends at \n, \r\n or \r, and a
// final line without a terminator still counts.
std::vector<std::string_view> split_lines(std::string_view contents) {
  std::vector<std::string_view> lines;
  std::size_t begin = 0;
  while (begin < contents.size()) {
    const std::size_t end = contents.find_first_of("\r\n", begin);
    if (end == std::string_view::npos) {
      lines.push_back(contents.substr(begin));
      break;
    }
    lines.push_back(contents.substr(begin, end - begin));
    begin =
        end +
        (contents[end] == '\r' && end + 1 < contents.size() && contents[end + 1] == '\n' ? 2 : 1);
  }
  return lines;
}

void check_utf8(std::string_view line, const std::string& file, std::size_t line_number) {
  std::size_t pos = 0;
  while (pos < line.size()) {
    if (!utf8::next_code_point(line, pos)) {
      throw Error("BERT vocab file " + file + ": line " + std::to_string(line_number) +
                  " is not valid UTF-8 at byte " + std::to_string(pos) + " of the line");
    }
  }
}

TokenId add_token(Vocab& vocab, std::string token) {
  const auto id = static_cast<TokenId>(vocab.tokens.size());
  if (token.size() > 2 && token.starts_with("##")) {
    vocab.longest_continuation = std::max(vocab.longest_continuation, token.size() - 2);
    vocab.continuation_ids.emplace(token.substr(2), id);
  }
  vocab.longest_token = std::max(vocab.longest_token, token.size());
  vocab.ids.emplace(token, id);
  vocab.tokens.push_back(std::move(token));
  return id;
}

// Megatron's add_token: the existing id, or a new one at the end.
TokenId find_or_append(Vocab& vocab, const std::string& token) {
  if (const auto it = vocab.ids.find(token); it != vocab.ids.end()) return it->second;
  return add_token(vocab, token);
}

}  // namespace

Vocab load_vocab(const std::filesystem::path& vocab_file, std::int64_t extra_ids) {
  Vocab vocab;
  vocab.file = vocab_file.string();
  if (extra_ids < 0) {
    throw Error("--vocab-extra-ids must not be negative (got " + std::to_string(extra_ids) + ")");
  }
  const std::string contents = read_whole_file(vocab_file);
  const std::vector<std::string_view> lines = split_lines(contents);
  // [BOS], [EOS] and the extra ids may all be appended.
  constexpr auto kMaxIds = static_cast<std::int64_t>(std::numeric_limits<TokenId>::max());
  if (static_cast<std::int64_t>(lines.size()) + 2 + extra_ids > kMaxIds) {
    throw Error("BERT vocab file " + vocab.file + ": " + std::to_string(lines.size()) +
                " lines plus " + std::to_string(extra_ids) +
                " extra ids do not fit in 32-bit token ids");
  }
  vocab.tokens.reserve(lines.size());
  vocab.ids.reserve(lines.size() + 2 + std::size_t(extra_ids));
  for (std::size_t i = 0; i < lines.size(); ++i) {
    check_utf8(lines[i], vocab.file, i + 1);
    const std::string_view token = python::strip(lines[i]);
    if (const auto it = vocab.ids.find(token); it != vocab.ids.end()) {
      // Megatron's dict would keep the later id and count the token once, so the [BOS] and [EOS]
      // it appends would take ids that lines of the file already have.
      throw Error("BERT vocab file " + vocab.file + ": line " + std::to_string(i + 1) +
                  " repeats the token \"" + std::string(token) + "\" of line " +
                  std::to_string(it->second + 1) + " (lines are compared after stripping spaces)");
    }
    add_token(vocab, std::string(token));
  }

  std::vector<std::string> missing;
  const auto required = [&](const char* token) {
    const auto it = vocab.ids.find(std::string_view(token));
    if (it == vocab.ids.end()) {
      missing.emplace_back(token);
      return TokenId{0};
    }
    return it->second;
  };
  vocab.cls = required("[CLS]");
  vocab.sep = required("[SEP]");
  vocab.pad = required("[PAD]");
  vocab.mask = required("[MASK]");
  if (!missing.empty()) {
    std::string list;
    for (const auto& token : missing)
      list += (list.empty() ? "" : ", ") + token;
    throw Error("BERT vocab file " + vocab.file + " has no " + list +
                (missing.size() == 1 ? " token" : " tokens") +
                " (the BERT WordPiece tokenizers need [CLS], [SEP], [PAD] and [MASK])");
  }
  if (const auto it = vocab.ids.find(std::string_view("[UNK]")); it != vocab.ids.end())
    vocab.unk = it->second;

  vocab.bos = find_or_append(vocab, "[BOS]");
  vocab.eos = find_or_append(vocab, "[EOS]");
  for (std::int64_t n = 0; n < extra_ids; ++n)
    vocab.extra_ids.push_back(find_or_append(vocab, "<extra_id_" + std::to_string(n) + ">"));
  return vocab;
}

}  // namespace megatron::wordpiece
