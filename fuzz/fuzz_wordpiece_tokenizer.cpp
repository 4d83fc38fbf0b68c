// libFuzzer target: BERT WordPiece (lower-cased and cased) on arbitrary bytes: invalid UTF-8 is
// refused with megatron::Error; anything else encodes to ids in the vocabulary, which decode.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "fuzz_tokenizers.h"
#include "megatron/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const bool lower_case : {true, false}) {
    const megatron::Tokenizer& tokenizer = megatron::fuzz::wordpiece_tokenizer(lower_case);
    std::vector<megatron::TokenId> ids;
    try {
      tokenizer.encode(text, ids);
    } catch (const megatron::Error&) {
      continue;
    }
    for (const megatron::TokenId id : ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= tokenizer.vocab_size()) std::abort();
    }
    (void)tokenizer.decode(ids);
  }
  return 0;
}
