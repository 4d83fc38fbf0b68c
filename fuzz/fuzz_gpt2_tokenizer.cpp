// libFuzzer target: GPT-2 byte-level BPE on arbitrary bytes. Valid UTF-8 must encode to ids in
// the vocabulary and decode back to the same bytes (byte-level BPE loses nothing); invalid UTF-8
// must be refused with megatron::Error.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "fuzz_tokenizers.h"
#include "megatron/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const megatron::Tokenizer& tokenizer = megatron::fuzz::gpt2_tokenizer();
  std::vector<megatron::TokenId> ids;
  try {
    tokenizer.encode(text, ids);
  } catch (const megatron::Error&) {
    return 0;
  }
  for (const megatron::TokenId id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= tokenizer.vocab_size()) std::abort();
  }
  if (tokenizer.decode(ids) != text) std::abort();
  return 0;
}
