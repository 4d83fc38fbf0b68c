// The [model] keys every transformer model shares (Megatron's argument names, defaults and
// consistency rules): sizes, norms, dropout, init, positions, vocabulary padding, recomputation.
// A model plugin declares them with declare_model_config and adds its own keys.
#pragma once

#include <cstdint>
#include <string>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

// `relative` (T5's bucketed bias) only where a plugin adds it to position_embedding_type's choices.
enum class PositionEmbedding { learned_absolute, rope, none, relative };
enum class Recompute { none, selective, full };
enum class RecomputeMethod { uniform, block };

struct ModelConfig {
  nn::TransformerConfig transformer;
  PositionEmbedding position_embedding = PositionEmbedding::learned_absolute;
  std::int64_t max_position_embeddings = 0;  // 0: the sequence length
  double rotary_percent = 1.0;
  double rotary_base = 10000;
  bool untie_embeddings_and_output_weights = false;
  std::int64_t make_vocab_size_divisible_by = 128;
  Recompute recompute_granularity = Recompute::none;
  RecomputeMethod recompute_method = RecomputeMethod::uniform;
  std::int64_t recompute_num_layers = 1;
};

void declare_model_config(config::TableSchema& schema);
ModelConfig parse_model_config(const config::ConfigTable& table);

}  // namespace megatron::nn
