// The [data] table of the `bert` dataset plugin: Megatron-LM's argument names for BERT
// pretraining data (pretrain_bert.py) and the options read from it.
#pragma once

#include "megatron/config/core_config.h"
#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/data/masked_data_options.h"
#include "megatron/data/masked_samples.h"
#include "megatron/data/split.h"

namespace megatron::bert_data {

// The blend, tokenizer and cache folder as data::read_masked_data_options reads them, and the
// sample options.
struct BertDataOptions : data::MaskedDataOptions {
  data::BertSampleOptions sample;  // sequence length, binary head, seed, masking
};

void declare_bert_data_config(config::TableSchema& schema);
// Reads the validated table; throws ConfigError naming the key when a file is missing.
BertDataOptions read_bert_data_options(const config::ConfigTable& table,
                                       const config::CoreConfig& core);

}  // namespace megatron::bert_data
