// Megatron's GPT dataset as a megatron::Dataset: per split a GPTDataset over one indexed dataset,
// or a BlendedDataset over several, built the way BlendedMegatronDatasetBuilder builds them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpt_options.h"
#include "megatron/data/blend.h"
#include "megatron/data/gpt_indices.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/dataset.h"
#include "megatron/plugin.h"

namespace megatron::gpt_data {

// One indexed dataset (Megatron's low-level dataset), shared by every split that reads it.
struct LowLevelDataset {
  std::string prefix;
  IndexedDataset data;
  std::vector<std::int32_t> sequence_lengths;
};

// One GPTDataset: the indices of one split of one low-level dataset.
struct MidLevelDataset {
  const LowLevelDataset* source = nullptr;
  data::GptIndices indices;
};

// What one split serves: a single GPTDataset, or a blend of several.
struct SplitDataset {
  std::vector<MidLevelDataset> constituents;
  std::optional<data::BlendIndices> blend;
  std::int64_t size = 0;
};

// The tokenizer the options name; ConfigError naming the key at fault in `table`.
std::unique_ptr<Tokenizer> open_gpt_tokenizer(const config::ConfigTable& table,
                                              const GptDataOptions& options);
// The fields of every sample, with their per-sample shapes.
SampleSpec gpt_sample_fields(const GptDataOptions& options);

class GptDataset final : public Dataset {
 public:
  // Reads the options, opens every dataset and the tokenizer; builds nothing yet.
  explicit GptDataset(PluginContext& context);

  // Rank 0 builds (or loads) the index caches first; after it succeeds, the other ranks load them.
  void build(const std::array<std::int64_t, 3>& num_samples) override;
  std::int64_t size(data::Split split) const override;
  std::int64_t seq_length() const override { return options_.seq_length; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  SampleSpec sample_fields() const override;
  void get(data::Split split, std::int64_t index, const SampleSlots& out) const override;

  // Where sample `index` of `split` comes from: its low-level dataset's prefix and the ids of the
  // sequences (Megatron's document ids) its tokens are read from, in order.
  struct SampleSource {
    std::string prefix;
    std::vector<std::int64_t> sequence_ids;
  };
  SampleSource sample_source(data::Split split, std::int64_t index) const;

 private:
  void build_here(const std::array<std::int64_t, 3>& num_samples);
  SplitDataset build_split(data::Split split, std::int64_t num_samples) const;
  MidLevelDataset build_mid_level(const LowLevelDataset& source, const BlendSpec& spec,
                                  data::Split split, const data::SplitMatrix& matrix,
                                  bool per_split_blend,
                                  std::optional<std::int64_t> num_samples) const;
  const LowLevelDataset& low_level(const std::string& prefix) const;
  // The GPTDataset that serves sample `index` of `split` and its item there (through the blend).
  struct Located {
    const MidLevelDataset* mid;
    std::int64_t item;
  };
  Located locate(data::Split split, std::int64_t index) const;
  // position_ids and/or attention_mask of a sample from its input tokens.
  void write_document_fields(std::span<const std::int32_t> inputs, TokenId eod,
                             const SampleSlots& out) const;

  Logger& log_;
  ParallelState& parallel_;
  config::ConfigTable table_;  // a copy, for errors that point into the config file
  GptDataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::int32_t pad_token_ = -1;  // GPTDataset's _pad_token_id
  std::vector<std::unique_ptr<LowLevelDataset>> low_level_;
  std::array<SplitDataset, 3> splits_;
};

}  // namespace megatron::gpt_data
