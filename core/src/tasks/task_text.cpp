// Megatron's tasks/data_utils.py (megatron/tasks/task_text.h).
#include "megatron/tasks/task_text.h"

#include "megatron/tasks/python_text.h"

namespace megatron::tasks {

std::string clean_text(std::string_view text) {
  // re.sub(r'\s+', ' ', text.replace("\n", " ")): every whitespace run becomes one space.
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t n = python_space_at(text, pos);
    if (n == 0) {
      out.push_back(text[pos++]);
      continue;
    }
    out.push_back(' ');
    pos += n;
    while (pos < text.size()) {
      const std::size_t more = python_space_at(text, pos);
      if (more == 0) break;
      pos += more;
    }
  }
  for (int pass = 0; pass < 3; ++pass) {
    std::string next;
    next.reserve(out.size());
    std::size_t at = 0;
    while (true) {
      const std::size_t hit = out.find(" . ", at);
      if (hit == std::string::npos) break;
      next.append(out, at, hit - at);
      next.append(". ");
      at = hit + 3;
    }
    next.append(out, at, std::string::npos);
    out = std::move(next);
  }
  return out;
}

TokenSequence build_sequence(const std::vector<TokenId>& a, const std::vector<TokenId>* b,
                             std::int64_t seq_length, TokenId cls, TokenId sep, TokenId pad) {
  TokenSequence s;
  auto push = [&](TokenId id, TokenId type) {
    s.ids.push_back(id);
    s.types.push_back(type);
    s.paddings.push_back(1);
  };
  push(cls, 0);
  for (TokenId id : a)
    push(id, 0);
  push(sep, 0);
  if (b) {
    for (TokenId id : *b)
      push(id, 1);
  }
  bool trimmed = false;
  const auto max = static_cast<std::size_t>(seq_length);
  if (s.ids.size() >= max) {
    s.ids.resize(max - 1);
    s.types.resize(max - 1);
    s.paddings.resize(max - 1);
    trimmed = true;
  }
  if (b || trimmed) push(sep, b ? 1 : 0);
  s.types.resize(max, pad);
  s.ids.resize(max, pad);
  s.paddings.resize(max, 0);
  return s;
}

std::string_view after_last(std::string_view text, std::string_view sep) {
  const std::size_t at = text.rfind(sep);
  return at == std::string_view::npos ? text : text.substr(at + sep.size());
}

std::string_view strip_chars(std::string_view text, std::string_view chars) {
  const std::size_t begin = text.find_first_not_of(chars);
  if (begin == std::string_view::npos) return {};
  const std::size_t end = text.find_last_not_of(chars);
  return text.substr(begin, end - begin + 1);
}

}  // namespace megatron::tasks
