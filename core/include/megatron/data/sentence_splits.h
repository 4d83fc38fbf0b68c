// The splits of Megatron's masked WordPiece datasets (BERT, T5) as BlendedMegatronDatasetBuilder
// makes them: the sentence-level datasets the [data] table names, each split's documents of each
// dataset (by `split` or per-split paths), one sample mapping per (dataset, split) built by the
// plugin, and Megatron's blend over them.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "megatron/config/table.h"
#include "megatron/data/blend.h"
#include "megatron/data/blend_config.h"
#include "megatron/data/gpt_indices.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/data/npy.h"
#include "megatron/data/split.h"
#include "megatron/data/split_builder.h"
#include "megatron/log.h"

namespace megatron {
class ParallelState;
}

namespace megatron::data {

// One sentence-level indexed dataset (Megatron's low-level dataset), shared by every split that
// reads it.
struct SentenceDataset {
  std::string prefix;
  std::string key;  // the [data] key that names it first, for messages
  IndexedDataset data;
  std::vector<std::int32_t> sentence_lengths;
  std::vector<std::int64_t> document_indices;
};

// What the plugin builds one mapping from: the dataset, its identity in Megatron's description
// (everything but the tokenizer) and the split's documents.
struct SentenceMappingRequest {
  const SentenceDataset* source = nullptr;
  GptDatasetIdentity identity;
  ElementRange documents;
  std::optional<std::int64_t> num_samples;  // nullopt: one epoch
};
struct SentenceMapping {
  IndexArray mapping;
  bool built = false;  // false: loaded from the cache
  std::filesystem::path cache_dir;
};
// Loads or builds the mapping (the masked dataset's cache); Errors name neither split nor
// dataset (the caller adds them).
using SentenceMappingBuilder = std::function<SentenceMapping(const SentenceMappingRequest&)>;

class SentenceSplits {
 public:
  // Opens every dataset `blends` names. `table` (the [data] table) must outlive this object.
  SentenceSplits(const config::ConfigTable& table, BlendConfig blends, double surplus, Logger& log,
                 ParallelState& parallel);

  const std::vector<std::unique_ptr<SentenceDataset>>& datasets() const { return datasets_; }

  // Builds the splits asked for samples (rank 0 first, the other ranks then load the caches),
  // logging "data: <split> split of <prefix>: built|loaded the sample index ... (<n> samples from
  // documents [b, e))" per mapping. Refuses (ConfigError naming the key) a train split without
  // documents and a blended constituent without documents; leaves other empty splits empty.
  void build(const std::array<std::int64_t, 3>& num_samples, const SentenceMappingBuilder& build);

  std::int64_t size(Split split) const;

  // Sample `index` of `split`: the mapping it comes from and its index there (a blended sample is
  // its constituent's sample, as BlendedDataset hands Megatron's __getitem__ the
  // dataset_sample_index). Throws megatron::Error for an index outside the split.
  struct Item {
    const SentenceDataset* source = nullptr;
    const IndexArray* mapping = nullptr;
    std::int64_t index = 0;
  };
  Item locate(Split split, std::int64_t index) const;

 private:
  struct Constituent {
    const SentenceDataset* source = nullptr;
    IndexArray mapping;
  };
  struct SplitData {
    std::vector<Constituent> constituents;
    std::optional<BlendIndices> blend;
    std::int64_t size = 0;
  };
  SplitData build_split(Split split, std::int64_t num_samples,
                        const SentenceMappingBuilder& build) const;
  Constituent build_constituent(const SentenceDataset& source, const SplitSource& where,
                                Split split, std::optional<std::int64_t> num_samples,
                                const SentenceMappingBuilder& build) const;
  const SentenceDataset& dataset(const std::string& prefix) const;

  const config::ConfigTable& table_;
  BlendConfig blends_;
  double surplus_;
  Logger& log_;
  ParallelState& parallel_;
  std::vector<std::unique_ptr<SentenceDataset>> datasets_;
  std::array<SplitData, 3> splits_;
};

}  // namespace megatron::data
