// Generated sentence-level datasets (documents of sentences, as `preprocess --split-sentences`
// lays them out) for the bert and t5 dataset plugin tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "megatron/data/indexed_dataset.h"

namespace megatron::test {

// The ranges the sentence counts, sentence lengths and token ids are drawn from (inclusive).
struct SentenceDatasetShape {
  int min_sentences = 1;
  int max_sentences = 1;
  int min_length = 1;
  int max_length = 1;
  std::int32_t first_token = 0;
  std::int32_t last_token = 0;
};

// Writes `documents` documents drawn uniformly from `shape` with std::mt19937(seed) to
// prefix.idx / prefix.bin (uint16 tokens). Returns the prefix.
inline std::string write_sentence_dataset(const std::string& prefix, int documents,
                                          const SentenceDatasetShape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> sentence_count(shape.min_sentences, shape.max_sentences);
  std::uniform_int_distribution<int> sentence_length(shape.min_length, shape.max_length);
  std::uniform_int_distribution<std::int32_t> token(shape.first_token, shape.last_token);
  IndexedDatasetWriter writer(bin_path(prefix), IndexDType::u16);
  for (int d = 0; d < documents; ++d) {
    std::vector<std::int32_t> tokens;
    std::vector<std::int64_t> lengths;
    for (int s = sentence_count(rng); s > 0; --s) {
      lengths.push_back(sentence_length(rng));
      for (std::int64_t i = 0; i < lengths.back(); ++i)
        tokens.push_back(token(rng));
    }
    writer.add_document(tokens, lengths);
  }
  writer.finalize(idx_path(prefix));
  return prefix;
}

}  // namespace megatron::test
