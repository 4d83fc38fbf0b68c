// Megatron's BERTMaskedWordPieceDataset as a megatron::Dataset: per split, the sentence mapping
// of its documents and, per sample, the masked [CLS] A [SEP] B [SEP] fields.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "bert_options.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/data/masked_samples.h"
#include "megatron/dataset.h"
#include "megatron/plugin.h"

namespace megatron::bert_data {

class BertDataset final : public Dataset {
 public:
  // Reads the options, opens the dataset and the tokenizer, checks that the data is
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
  data::IndexArray build_split(data::Split split, std::int64_t num_samples) const;

  Logger& log_;
  ParallelState& parallel_;
  config::ConfigTable table_;  // a copy, for errors that point into the config file
  BertDataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<IndexedDataset> data_;
  std::vector<std::int32_t> sentence_lengths_;
  std::vector<std::int64_t> document_indices_;
  std::vector<std::uint8_t> continues_word_;
  std::vector<std::int64_t> token_lookup_;
  data::WordPieceVocabulary vocabulary_;
  std::array<data::IndexArray, 3> mappings_;
  std::array<std::int64_t, 3> sizes_{};
};

}  // namespace megatron::bert_data
