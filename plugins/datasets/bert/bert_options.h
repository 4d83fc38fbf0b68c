// The [data] table of the `bert` dataset plugin: Megatron-LM's argument names for BERT
// pretraining data (pretrain_bert.py) and the options read from it.
#pragma once

#include <optional>
#include <string>

#include "megatron/config/core_config.h"
#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/data/blend.h"
#include "megatron/data/blend_config.h"
#include "megatron/data/masked_samples.h"
#include "megatron/data/split.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::bert_data {

struct BertDataOptions {
  // Sentence-level datasets (P.idx / P.bin): data_path with `split`, or train/valid/test_data_path.
  data::BlendConfig blends;
  std::string tokenizer_type;
  TokenizerFiles tokenizer_files;
  std::optional<std::string> data_cache_path;
  double mid_level_dataset_surplus = data::kDefaultMidLevelSurplus;
  data::BertSampleOptions sample;  // sequence length, binary head, seed, masking
};

void declare_bert_data_config(config::TableSchema& schema);
// Reads the validated table; throws ConfigError naming the key when a file is missing.
BertDataOptions read_bert_data_options(const config::ConfigTable& table,
                                       const config::CoreConfig& core);

}  // namespace megatron::bert_data
