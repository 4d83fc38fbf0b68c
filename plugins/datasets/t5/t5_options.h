// The [data] table of the `t5` dataset plugin: Megatron-LM's argument names for T5 pretraining
// data (pretrain_t5.py) and the options read from it.
#pragma once

#include "megatron/config/core_config.h"
#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/data/masked_data_options.h"
#include "megatron/data/t5_samples.h"

namespace megatron::t5_data {

// The blend, tokenizer and cache folder as data::read_masked_data_options reads them, and the
// sample options.
struct T5DataOptions : data::MaskedDataOptions {
  data::T5SampleOptions sample;  // encoder and decoder lengths, seed, masking
};

void declare_t5_data_config(config::TableSchema& schema);
// Reads the validated table; throws ConfigError naming the key when a file is missing.
T5DataOptions read_t5_data_options(const config::ConfigTable& table,
                                   const config::CoreConfig& core);

}  // namespace megatron::t5_data
