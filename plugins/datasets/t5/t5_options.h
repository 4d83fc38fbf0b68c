// The [data] table of the `t5` dataset plugin: Megatron-LM's argument names for T5 pretraining
// data (pretrain_t5.py) and the options read from it.
#pragma once

#include <optional>
#include <string>

#include "megatron/config/core_config.h"
#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/data/blend.h"
#include "megatron/data/blend_config.h"
#include "megatron/data/t5_samples.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::t5_data {

struct T5DataOptions {
  // Sentence-level datasets (P.idx / P.bin): data_path with `split`, or train/valid/test_data_path.
  data::BlendConfig blends;
  std::string tokenizer_type;
  TokenizerFiles tokenizer_files;
  std::optional<std::string> data_cache_path;
  double mid_level_dataset_surplus = data::kDefaultMidLevelSurplus;
  data::T5SampleOptions sample;  // encoder and decoder lengths, seed, masking
};

void declare_t5_data_config(config::TableSchema& schema);
// Reads the validated table; throws ConfigError naming the key when a file is missing.
T5DataOptions read_t5_data_options(const config::ConfigTable& table,
                                   const config::CoreConfig& core);

}  // namespace megatron::t5_data
