// The [data] table of the `gpt` dataset plugin: its keys (Megatron-LM's argument names) and the
// options read from it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megatron/config/core_config.h"
#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/data/blend_config.h"
#include "megatron/data/split.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::gpt_data {

using data::BlendSpec;

struct GptDataOptions {
  data::BlendConfig blends;  // data_path with `split`, or train/valid/test_data_path
  std::int64_t seq_length = 0;
  std::string tokenizer_type;
  TokenizerFiles tokenizer_files;
  std::optional<std::string> data_cache_path;
  bool eod_mask_loss = false;
  bool reset_position_ids = false;    // sample field position_ids
  bool reset_attention_mask = false;  // sample field attention_mask (first visible key per token)
  bool drop_last_partial_validation_sequence = true;
  double mid_level_dataset_surplus = 0.005;
  std::int64_t seed = 1234;  // [training] seed
};

void declare_gpt_data_config(config::TableSchema& schema);

// Reads the validated table. Throws ConfigError, naming the key and the file, when a dataset's
// .idx or .bin file is missing or the tokenizer lacks a file it needs.
GptDataOptions read_gpt_data_options(const config::ConfigTable& table,
                                     const config::CoreConfig& core);

}  // namespace megatron::gpt_data
