// Megatron's T5MaskedWordPieceDataset as a megatron::Dataset: per split, the sentence mapping of
// one sentence-level dataset's documents, or a BlendedDataset over several such mappings, and,
// per sample, the encoder input with sentinels and the decoder input and labels of the spans.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "megatron/data/blend.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/data/split_builder.h"
#include "megatron/data/t5_samples.h"
#include "megatron/dataset.h"
#include "megatron/plugin.h"
#include "t5_options.h"

namespace megatron::t5_data {

// One sentence-level indexed dataset (Megatron's low-level dataset), shared by every split that
// reads it.
struct SentenceDataset {
  std::string prefix;
  IndexedDataset data;
  std::vector<std::int32_t> sentence_lengths;
  std::vector<std::int64_t> document_indices;
};

// One T5MaskedWordPieceDataset: the sentence mapping of one split of one dataset.
struct MaskedDataset {
  const SentenceDataset* source = nullptr;
  data::IndexArray mapping;
};

// What one split serves: a single T5MaskedWordPieceDataset, or a blend of several.
struct SplitDataset {
  std::vector<MaskedDataset> constituents;
  std::optional<data::BlendIndices> blend;
  std::int64_t size = 0;
};

class T5Dataset final : public Dataset {
 public:
  // Reads the options, opens every dataset and the tokenizer, checks that the vocabulary has the
  // special tokens and sentinels T5 needs; builds nothing yet.
  explicit T5Dataset(PluginContext& context);

  // text_enc, enc_mask: [encoder length]; text_dec, labels, loss_mask, dec_mask: [decoder
  // length]; truncated: a scalar.
  SampleSpec sample_fields() const override;
  // Rank 0 builds (or loads) the sample-index caches first; the other ranks then load them.
  void build(const std::array<std::int64_t, 3>& num_samples) override;
  std::int64_t size(data::Split split) const override;
  // The encoder length (Megatron's args.seq_length is the encoder's too).
  std::int64_t seq_length() const override { return options_.sample.encoder_length; }
  // Megatron's --decoder-seq-length: the length of text_dec, labels, loss_mask and dec_mask.
  std::int64_t decoder_seq_length() const { return options_.sample.decoder_length; }
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
  T5DataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<SentenceDataset>> datasets_;
  std::vector<std::uint8_t> continues_word_;
  std::vector<std::int64_t> sentinels_;
  data::T5Vocabulary vocabulary_;
  std::array<SplitDataset, 3> splits_;
};

}  // namespace megatron::t5_data
