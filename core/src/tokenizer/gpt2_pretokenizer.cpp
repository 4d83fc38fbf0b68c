// Compiles GPT-2's pre-tokenizer pattern with PCRE2 (UTF + UCP, so \s, \p{L}, \p{N} are Unicode).
#include "tokenizer/gpt2_pretokenizer.h"

#include <string>

#include "megatron/error.h"

namespace megatron::gpt2 {

namespace {

// The pattern of OpenAI's encoder.py and Megatron's gpt2_tokenization.py, unchanged.
constexpr std::string_view kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int length = pcre2_get_error_message(code, buffer, sizeof buffer);
  return length < 0 ? "PCRE2 error " + std::to_string(code)
                    : std::string(reinterpret_cast<const char*>(buffer), std::size_t(length));
}

// One match-data block per thread: matching must not allocate, and a block cannot be shared.
// Only the overall match (one offset pair) is read, so one size fits every pattern.
struct ThreadMatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ~ThreadMatchData() { pcre2_match_data_free(data); }
};

}  // namespace

PreTokenizer::PreTokenizer() {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(),
                        PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (!code_) {
    throw Error("GPT-2 pre-tokenizer pattern, offset " + std::to_string(error_offset) + ": " +
                pcre2_message(error_code));
  }
  // Without JIT (a PCRE2 built without it) matching still works, only slower.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

PreTokenizer::~PreTokenizer() {
  pcre2_code_free(code_);
}

bool PreTokenizer::next_match(std::string_view text, std::size_t offset, bool utf_checked,
                              std::size_t& begin, std::size_t& end) const {
  thread_local ThreadMatchData match;
  if (!match.data) throw Error("GPT-2 pre-tokenizer: out of memory for PCRE2 match data");
  // PCRE2 validates the whole subject on every call unless told not to; once is enough.
  const std::uint32_t options = utf_checked ? PCRE2_NO_UTF_CHECK : 0;
  const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), offset,
                             options, match.data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
      throw Error("text is not valid UTF-8 at byte " +
                  std::to_string(pcre2_get_startchar(match.data)) + ": " + pcre2_message(rc));
    }
    throw Error("GPT-2 pre-tokenizer failed at byte " + std::to_string(offset) + ": " +
                pcre2_message(rc));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
  begin = ovector[0];
  end = ovector[1];
  return true;
}

}  // namespace megatron::gpt2
