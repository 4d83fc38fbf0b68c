// Megatron's T5MaskedWordPieceDataset, sample for sample: the sentence mapping it asks
// build_mapping for, T5MaskedWordPieceDataset.__getitem__ (span masking with sentinels), and its
// cache description and files. The shared masked-dataset pieces are in masked_samples.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "megatron/data/masked_samples.h"

namespace megatron {
class IndexedDataset;
}

namespace megatron::data {

// pretrain_t5.py's masking: whole words, SpanBERT n-gram sizes (geometric, p = 0.2) capped at 10,
// no permutation, with --mask-prob.
MaskingOptions t5_masking_options(double masking_probability);

struct T5SampleOptions {
  std::int64_t encoder_length = 512;  // sequence_length (= sequence_length_encoder)
  std::int64_t decoder_length = 128;  // sequence_length_decoder
  std::int64_t seed = 1234;           // random_seed: sample i uses RandomState((seed+i) % 2^32)
  double short_sequence_probability = 0.1;  // only for the mapping and the description
  MaskingOptions masking = t5_masking_options(0.15);
};

// Mapping options for T5: max_seq_length encoder_length - 2 (Megatron reserves a <bos> and an
// <eos>, although the encoder input holds neither), at least one sentence per row.
SampleMappingOptions t5_sample_mapping_options(const T5SampleOptions& options,
                                               std::optional<std::int64_t> num_samples);

// The tokenizer facts T5 needs besides the masking's.
struct T5Vocabulary {
  WordPieceVocabulary wordpiece;  // cls/sep are never masked; `mask` fills masked positions
  std::int64_t bos = 0;
  std::int64_t eos = 0;
  // additional_special_tokens_ids: <extra_id_0>, <extra_id_1>, ... in order; span k gets the
  // k-th one.
  std::span<const std::int64_t> sentinels;
};

// The dict __getitem__ returns. The arrays are numpy int64 in Megatron; truncated is an int.
struct T5Sample {
  std::vector<std::int64_t> text_enc;   // tokens, each masked span replaced by its sentinel; pad
  std::vector<std::int64_t> text_dec;   // <bos>, then per span its sentinel and tokens; pad
  std::vector<std::int64_t> labels;     // per span its sentinel and tokens, then <eos>; -1
  std::vector<std::int64_t> loss_mask;  // 1 over the decoder tokens
  std::vector<std::int64_t> enc_mask;   // 1 over the encoder tokens, 0 over the padding
  std::vector<std::int64_t> dec_mask;   // 1 over the decoder tokens, 0 over the padding
  std::int64_t truncated = 0;           // the sentences held more than the target length
};

// Sample `sample_index` from its mapping row's sentences and target length. Throws
// megatron::Error when the target exceeds the encoder length, when a sample masks more spans
// than there are sentinels, when its decoder input is longer than the decoder length (where
// Megatron fails an assert or pops an empty deque), or for a token id outside the vocabulary.
T5Sample make_t5_sample(std::span<const std::vector<std::int64_t>> sentences,
                        std::int64_t target_sequence_length, std::int64_t sample_index,
                        const T5SampleOptions& options, const T5Vocabulary& vocabulary);
// The same, reading row `sample_index` of `mapping` and its sentences from `dataset`.
T5Sample make_t5_sample(const IndexedDataset& dataset, const IndexArray& mapping,
                        std::int64_t sample_index, const T5SampleOptions& options,
                        const T5Vocabulary& vocabulary);

// Megatron's unique description of a T5MaskedWordPieceDataset: the MaskedWordPieceDataset
// fields (sequence_length being the encoder's), then sequence_length_decoder.
std::string t5_description(const GptDatasetIdentity& identity, const T5SampleOptions& options,
                           std::optional<std::int64_t> num_samples);

// load_or_build_masked_sample_mapping for a T5MaskedWordPieceDataset with these options (files
// <md5>-T5MaskedWordPieceDataset-*, default folder default_masked_cache_dir(prefix,
// kT5DatasetClass)).
IndexArray load_or_build_t5_sample_mapping(const std::filesystem::path& cache_dir,
                                           const GptDatasetIdentity& identity,
                                           const T5SampleOptions& options,
                                           std::optional<std::int64_t> num_samples,
                                           std::span<const std::int64_t> document_indices,
                                           std::int64_t document_begin, std::int64_t document_end,
                                           std::span<const std::int32_t> sentence_lengths,
                                           bool* built = nullptr);

}  // namespace megatron::data
