// GPT-2's pre-tokenizer: the regex that splits text into the pieces BPE runs on, via PCRE2.
#pragma once

#include <cstddef>
#include <string_view>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace megatron::gpt2 {

class PreTokenizer {
 public:
  PreTokenizer();  // compiles (and JIT-compiles) the pattern once
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Calls on_piece(std::string_view) for each piece of `text`, in order (like Python's
  // re.findall). Throws Error naming the byte offset when `text` is not valid UTF-8.
  template <typename OnPiece>
  void split(std::string_view text, OnPiece&& on_piece) const {
    std::size_t offset = 0;
    bool utf_checked = false;
    while (offset < text.size()) {
      std::size_t begin = 0, end = 0;
      if (!next_match(text, offset, utf_checked, begin, end)) break;
      on_piece(text.substr(begin, end - begin));
      offset = end;
      utf_checked = true;
    }
  }

 private:
  // The next match at or after `offset`; false when there is none.
  bool next_match(std::string_view text, std::size_t offset, bool utf_checked, std::size_t& begin,
                  std::size_t& end) const;

  pcre2_code* code_ = nullptr;
};

}  // namespace megatron::gpt2
