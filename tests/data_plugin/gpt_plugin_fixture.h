// Helpers for the `gpt` dataset plugin tests: scratch datasets written with the core writer, and
// the plugin created through the catalog from the built plugin directory, with its log captured.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "dataset_plugin_fixture.h"
#include "megatron/data/indexed_dataset.h"

namespace megatron::test {

inline constexpr std::int32_t kEod = 50256;  // GPT-2's <|endoftext|>
inline const std::string kVocabFile = std::string(DATA_DIR) + "/encoder.json";
inline const std::string kMergeFile = std::string(DATA_DIR) + "/vocab.bpe";

// Writes `documents` documents (one sequence each, as preprocess without sentence splitting) of
// random lengths in [min_length, max_length], tokens drawn from [first_token, first_token + 900)
// and EOD last. Returns the prefix.
inline std::string write_dataset(const std::string& prefix, int documents, int min_length,
                                 int max_length, std::int32_t first_token, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(min_length, max_length);
  std::uniform_int_distribution<std::int32_t> token(first_token, first_token + 899);
  IndexedDatasetWriter writer(bin_path(prefix), IndexDType::u16);
  for (int d = 0; d < documents; ++d) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(length(rng)));
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i)
      tokens[i] = token(rng);
    tokens.back() = kEod;
    const std::vector<std::int64_t> lengths = {static_cast<std::int64_t>(tokens.size())};
    writer.add_document(tokens, lengths);
  }
  writer.finalize(idx_path(prefix));
  return prefix;
}

// The [data] table of a gpt dataset over `data_path` (a TOML value), plus `extra` lines.
inline std::string gpt_table(const std::string& data_path, int seq_length,
                             const std::string& extra = "") {
  return "[data]\ntype = \"gpt\"\ndata_path = " + data_path +
         "\nseq_length = " + std::to_string(seq_length) + "\nvocab_file = " + quoted(kVocabFile) +
         "\nmerge_file = " + quoted(kMergeFile) + "\n" + extra;
}

// Creates the built `gpt` plugin through the catalog, as the host does.
class GptPluginTest : public DatasetPluginTest {
 protected:
  GptPluginTest() : DatasetPluginTest("gpt") {}
};

// One sample as the plugin serves it.
struct Sample {
  std::vector<std::int32_t> tokens, labels;
  std::vector<float> loss_mask;
};

inline Sample get_sample(const Dataset& dataset, data::Split split, std::int64_t index) {
  Batch batch = Batch::allocate(dataset.sample_fields(), 1);
  dataset.get(split, index, batch.sample(0));
  const std::int64_t n = dataset.seq_length();
  return {field_values<std::int32_t>(batch, "tokens", n),
          field_values<std::int32_t>(batch, "labels", n),
          field_values<float>(batch, "loss_mask", n)};
}

}  // namespace megatron::test
