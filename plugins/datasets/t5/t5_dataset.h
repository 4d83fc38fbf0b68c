// Megatron's T5MaskedWordPieceDataset as a megatron::Dataset: per split, the sentence mapping of
// one sentence-level dataset's documents, or a BlendedDataset over several such mappings (the
// core's SentenceSplits), and, per sample, the encoder input with sentinels and the decoder input
// and labels of the spans.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "megatron/data/sentence_splits.h"
#include "megatron/data/t5_samples.h"
#include "megatron/data/tokenizer_vocabulary.h"
#include "megatron/dataset.h"
#include "megatron/plugin.h"
#include "t5_options.h"

namespace megatron::t5_data {

// The fields of every sample, with their per-sample shapes.
SampleSpec t5_sample_fields(const T5DataOptions& options);

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
  std::int64_t size(data::Split split) const override { return splits_.size(split); }
  // The encoder length (Megatron's args.seq_length is the encoder's too).
  std::int64_t seq_length() const override { return options_.sample.encoder_length; }
  // Megatron's --decoder-seq-length: the length of text_dec, labels, loss_mask and dec_mask.
  std::int64_t decoder_seq_length() const { return options_.sample.decoder_length; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  void get(data::Split split, std::int64_t index, const SampleSlots& out) const override;

 private:
  // One T5MaskedWordPieceDataset's sample index, from Megatron's cache or built into it.
  data::SentenceMapping build_mapping(const data::SentenceMappingRequest& request) const;

  Logger& log_;
  ParallelState& parallel_;
  config::ConfigTable table_;  // a copy, for errors that point into the config file
  T5DataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  data::TokenizerVocabulary wordpiece_;  // what vocabulary_.wordpiece points into
  std::vector<std::int64_t> sentinels_;
  data::T5Vocabulary vocabulary_;
  data::SentenceSplits splits_;
};

}  // namespace megatron::t5_data
