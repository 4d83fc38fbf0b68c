// Megatron's BERTMaskedWordPieceDataset as a megatron::Dataset: per split, the sentence mapping
// of one sentence-level dataset's documents, or a BlendedDataset over several such mappings, and,
// per sample, the masked [CLS] A [SEP] B [SEP] fields.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bert_options.h"
#include "megatron/data/blend.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/data/masked_samples.h"
#include "megatron/data/split_builder.h"
#include "megatron/dataset.h"
#include "megatron/plugin.h"

namespace megatron::bert_data {

// One sentence-level indexed dataset (Megatron's low-level dataset), shared by every split that
// reads it.
struct SentenceDataset {
  std::string prefix;
  IndexedDataset data;
  std::vector<std::int32_t> sentence_lengths;
  std::vector<std::int64_t> document_indices;
};

// One BERTMaskedWordPieceDataset: the sentence mapping of one split of one dataset.
struct MaskedDataset {
  const SentenceDataset* source = nullptr;
  data::IndexArray mapping;
};

// What one split serves: a single BERTMaskedWordPieceDataset, or a blend of several.
struct SplitDataset {
  std::vector<MaskedDataset> constituents;
  std::optional<data::BlendIndices> blend;
  std::int64_t size = 0;
};

class BertDataset final : public Dataset {
 public:
  // Reads the options, opens every dataset and the tokenizer, checks that the data is
  // sentence-level and the vocabulary has BERT's special tokens; builds nothing yet.
  explicit BertDataset(PluginContext& context);

  SampleSpec sample_fields() const override;
  // Rank 0 builds (or loads) the sample-index caches first; the other ranks then load them.
  void build(const std::array<std::int64_t, 3>& num_samples) override;
  std::int64_t size(data::Split split) const override;
  std::int64_t seq_length() const override { return options_.sample.sequence_length; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  void get(data::Split split, std::int64_t index, const SampleSlots& out) const override;

 private:
  SplitDataset build_split(data::Split split, std::int64_t num_samples) const;
  MaskedDataset build_masked(const SentenceDataset& source, const data::SplitSource& where,
                             data::Split split, std::optional<std::int64_t> num_samples) const;
  const SentenceDataset& sentences(const std::string& prefix) const;

  Logger& log_;
  ParallelState& parallel_;
  config::ConfigTable table_;  // a copy, for errors that point into the config file
  BertDataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<SentenceDataset>> datasets_;
  std::vector<std::uint8_t> continues_word_;
  std::vector<std::int64_t> token_lookup_;
  data::WordPieceVocabulary vocabulary_;
  std::array<SplitDataset, 3> splits_;
};

}  // namespace megatron::bert_data
