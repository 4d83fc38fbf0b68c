// libFuzzer target: one line of preprocess's loose-JSON input (the code `megatron-app preprocess`
// runs per line), with the GPT-2 tokenizer and two keys, with and without sentence splitting. A
// bad line comes back with a problem to report; nothing throws.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands/preprocess_line.h"
#include "fuzz_tokenizers.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  static const megatron::SentenceSplitter splitter;
  const std::vector<std::string> keys{"text", "title"};
  const megatron::Tokenizer& tokenizer = megatron::fuzz::gpt2_tokenizer();
  for (const megatron::SentenceSplitter* split :
       {static_cast<const megatron::SentenceSplitter*>(nullptr), &splitter}) {
    const auto encoded = megatron::app::encode_line(line, keys, true, tokenizer, split);
    if (encoded.problem.empty()) {
      if (encoded.documents.size() != keys.size()) std::abort();
      for (const auto& document : encoded.documents) {
        std::int64_t total = 0;
        for (const std::int64_t length : document.lengths)
          total += length;
        if (total != static_cast<std::int64_t>(document.tokens.size())) std::abort();
      }
    }
  }
  return 0;
}
