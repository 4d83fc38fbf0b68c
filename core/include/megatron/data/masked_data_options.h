// What the bert and t5 dataset plugins (Megatron's masked WordPiece datasets) read alike from
// their [data] tables: the sentence-level blend, the WordPiece tokenizer and the cache folder.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/data/blend.h"
#include "megatron/data/blend_config.h"
#include "megatron/data/gpt_indices.h"
#include "megatron/data/sentence_splits.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::data {

struct MaskedDataOptions {
  // Sentence-level datasets (P.idx / P.bin): data_path with `split`, or train/valid/test_data_path.
  BlendConfig blends;
  std::string tokenizer_type;
  TokenizerFiles tokenizer_files;
  std::optional<std::string> data_cache_path;
  double mid_level_dataset_surplus = kDefaultMidLevelSurplus;
};

// The core's blend keys (data_path, split, per-split paths) described for sentence-level data.
void declare_sentence_blend_keys(config::TableSchema& schema);

// Reads the blend, tokenizer_type, vocab_file, vocab_extra_ids and data_cache_path of a validated
// table into `options` (paths made absolute; the cache descriptions hold them). Throws
// ConfigError naming the key when a dataset file is missing.
void read_masked_data_options(const config::ConfigTable& table, MaskedDataOptions& options);

// make_tokenizer for these options; its errors become ConfigErrors on tokenizer_type (a
// UsageError: the type) or vocab_file (any other megatron::Error).
std::unique_ptr<Tokenizer> open_masked_data_tokenizer(const config::ConfigTable& table,
                                                      const MaskedDataOptions& options);

// The request's dataset identity with the WordPiece tokenizer's, as Megatron describes it.
GptDatasetIdentity masked_dataset_identity(const SentenceMappingRequest& request,
                                           const MaskedDataOptions& options);

// data_cache_path when given, else Megatron's default folder of `class_name` for the dataset.
std::filesystem::path masked_cache_dir(const MaskedDataOptions& options,
                                       const std::string& dataset_prefix,
                                       std::string_view class_name);

}  // namespace megatron::data
