// Megatron's BERTMaskedWordPieceDataset as a megatron::Dataset: per split, the sentence mapping
// of one sentence-level dataset's documents, or a BlendedDataset over several such mappings (the
// core's SentenceSplits), and, per sample, the masked [CLS] A [SEP] B [SEP] fields.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "bert_options.h"
#include "megatron/data/masked_samples.h"
#include "megatron/data/sentence_splits.h"
#include "megatron/data/tokenizer_vocabulary.h"
#include "megatron/dataset.h"
#include "megatron/plugin.h"

namespace megatron::bert_data {

// The fields of every sample, with their per-sample shapes.
SampleSpec bert_sample_fields(const BertDataOptions& options);

class BertDataset final : public Dataset {
 public:
  // Reads the options, opens every dataset and the tokenizer, checks that the data is
  // sentence-level and the vocabulary has BERT's special tokens; builds nothing yet.
  explicit BertDataset(PluginContext& context);

  SampleSpec sample_fields() const override;
  // Rank 0 builds (or loads) the sample-index caches first; the other ranks then load them.
  void build(const std::array<std::int64_t, 3>& num_samples) override;
  std::int64_t size(data::Split split) const override { return splits_.size(split); }
  std::int64_t seq_length() const override { return options_.sample.sequence_length; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  void get(data::Split split, std::int64_t index, const SampleSlots& out) const override;

 private:
  // One BERTMaskedWordPieceDataset's sample index, from Megatron's cache or built into it.
  data::SentenceMapping build_mapping(const data::SentenceMappingRequest& request) const;

  Logger& log_;
  ParallelState& parallel_;
  config::ConfigTable table_;  // a copy, for errors that point into the config file
  BertDataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  data::TokenizerVocabulary vocabulary_;
  data::SentenceSplits splits_;
};

}  // namespace megatron::bert_data
