// Megatron's GPT sample order: the document, sample and shuffle indices of GPTDataset, built with
// numpy's RandomState in Megatron's call order so the samples and their order are identical, and
// cached as .npy files under Megatron's file names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megatron/data/npy.h"
#include "megatron/data/numpy_random.h"
#include "megatron/data/split.h"

namespace megatron::data {

struct GptIndexOptions {
  std::int64_t sequence_length = 0;
  std::optional<std::int64_t> num_samples;  // nullopt: exactly one epoch
  std::int64_t seed = 1234;
  bool add_extra_token = true;             // samples of sequence_length + 1 tokens
  bool drop_last_partial_sequence = true;  // Megatron lets only the valid split keep it
};

// One run of a sample's tokens: `length` tokens of sequence `sequence_id` from `offset`.
struct SamplePiece {
  std::int32_t sequence_id = 0;
  std::int64_t offset = 0;
  std::int64_t length = 0;
  bool operator==(const SamplePiece&) const = default;
};

struct GptIndices {
  // The split's sequence ids tiled once per epoch and shuffled.
  std::vector<std::int32_t> document_index;
  // [n + 1, 2] (position in document_index, token offset) where each sample starts; sample j
  // ends at entry j + 1, whose token it shares with sample j + 1. int32, or int64 if needed.
  IndexArray sample_index;
  // [n]: dataset item k is sample shuffle_index[k]. uint32, or int64 if needed.
  IndexArray shuffle_index;

  std::int64_t sequence_length = 0;
  bool add_extra_token = true;
  std::int64_t tokens_per_epoch = 0;
  std::int64_t num_epochs = 0;
  bool separate_final_epoch = false;

  std::int64_t size() const { return static_cast<std::int64_t>(shuffle_index.size()); }
  // The token runs of dataset item `item` (after the shuffle), in order. They add up to
  // sequence_length + add_extra_token tokens, except for a kept last partial sample, which the
  // reader pads.
  std::vector<SamplePiece> sample_pieces(std::int64_t item,
                                         std::span<const std::int32_t> sequence_lengths) const;
};

// The pieces, each as Megatron computes it; build_gpt_indices runs them in order on one
// RandomState. `sequence_lengths` is indexed by sequence id (the whole low-level dataset).
std::int64_t count_tokens(std::span<const std::int32_t> sequence_ids,
                          std::span<const std::int32_t> sequence_lengths);
// The fewest epochs with epochs * T >= num_samples * S + extra (one when num_samples is unset).
std::int64_t gpt_num_epochs(std::int64_t tokens_per_epoch, const GptIndexOptions& options);
// Whether the last epoch is shuffled on its own: it contributes fewer than
// int(0.80 * samples per epoch) samples.
bool gpt_separate_final_epoch(std::int64_t tokens_per_epoch, std::int64_t num_epochs,
                              const GptIndexOptions& options);
std::vector<std::int32_t> build_document_index(std::span<const std::int32_t> sequence_ids,
                                               std::int64_t num_epochs, NumpyRandomState& random,
                                               bool separate_final_epoch);
IndexArray build_sample_index(std::span<const std::int32_t> sequence_lengths,
                              std::span<const std::int32_t> document_index,
                              std::int64_t sequence_length, std::int64_t num_epochs,
                              std::int64_t tokens_per_epoch, bool drop_last_partial_sequence,
                              bool add_extra_token);
// arange(num_samples) shuffled, then arange(num_samples, total_size) shuffled after it.
IndexArray build_shuffle_index(std::int64_t num_samples, std::int64_t total_size,
                               NumpyRandomState& random);

// All three indices for one split. Throws megatron::Error for an empty split, a split of one
// token, a sequence length below 2 or a seed numpy would refuse.
GptIndices build_gpt_indices(std::span<const std::int32_t> sequence_ids,
                             std::span<const std::int32_t> sequence_lengths,
                             const GptIndexOptions& options);

// ---- Cache ----------------------------------------------------------------------------------

// Megatron's tokenizer unique_identifiers: class name, tokenizer paths, options as strings.
struct TokenizerIdentity {
  std::string class_name;
  std::vector<std::string> paths;
  std::vector<std::pair<std::string, std::string>> options;
};

// What, besides the options, identifies a GPTDataset in Megatron's description.
struct GptDatasetIdentity {
  std::string dataset_path;  // the path prefix as configured
  Split split = Split::kTrain;
  std::optional<std::string> split_string;  // config.split; nullopt for per-split blends
  std::optional<SplitMatrix> split_matrix;  // nullopt for per-split blends
  TokenizerIdentity tokenizer;
};

// Megatron's unique description (JSON, indent 4) of a GPTDataset. Two options Megatron leaves out
// of it (add_extra_token, drop_last_partial_sequence) are added only when not at their defaults,
// so the default description, and its md5, are Megatron's.
std::string gpt_description(const GptDatasetIdentity& identity, const GptIndexOptions& options);
// Hex MD5 of a description: the first part of every cache file name.
std::string description_md5(std::string_view description);

// Megatron's default cache folder: <dataset path prefix>/cache/GPTDataset_indices.
std::filesystem::path default_gpt_cache_dir(const std::string& dataset_path);

// Loads the split's indices from `cache_dir` when all four files
// <md5>-GPTDataset-<split>-{description.txt,document_index.npy,sample_index.npy,shuffle_index.npy}
// are there with the expected description; otherwise builds and writes them (each file through a
// temporary name, the description last). A cache whose arrays are damaged or do not fit the data
// is refused with a megatron::Error naming the file and what was expected. `built` tells which
// happened. In a multi-rank job one rank should build first and the others load after a barrier.
GptIndices load_or_build_gpt_indices(const std::filesystem::path& cache_dir,
                                     const GptDatasetIdentity& identity,
                                     std::span<const std::int32_t> sequence_ids,
                                     std::span<const std::int32_t> sequence_lengths,
                                     const GptIndexOptions& options, bool* built = nullptr);

}  // namespace megatron::data
