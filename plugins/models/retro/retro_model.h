// Megatron-core's RetroModel (local spec): a GPT whose decoder layers at the Retro layer numbers
// (6, 9, 12, ...; from 9 with more than 15 layers) carry chunked cross-attention between
// self-attention and the MLP, the first of them running the retrieval encoder over the embedded
// neighbour tokens. The pre-process embeds both the tokens and the neighbours (the same
// embedding, as RetroModel's `self.embedding(context_input_ids, ...)`), and everything else is
// GPT's. Pipeline parallelism is refused, as Megatron refuses it; sequence parallelism (which
// Megatron refuses for Retro) works: the Retro blocks gather the sequence they need.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chunked_cross_attention.h"
#include "megatron/nn/language_model.h"
#include "retriever_cross_attention.h"

namespace megatron::retro {

// The batch field of the neighbours' tokens: (B, l, k, r) i32, neighbour j of chunk c of sample
// b and its continuation (Megatron's RetroDataset `neighbor_tokens`).
inline constexpr const char* kNeighborTokens = "neighbor_tokens";
// Optional (B, l, k, r) i32: the neighbour tokens' positions when the dataset resets them
// (reset_position_ids); absent, 0 ... r - 1.
inline constexpr const char* kNeighborPositionIds = "neighbor_position_ids";

struct RetroConfig {
  nn::ModelConfig model;
  ChunkShape chunks;        // retro_chunk_length, retro_num_neighbors, retrieved length
  EncoderSettings encoder;  // retro_encoder_*
};

// Megatron's get_retro_decoder_block_spec: 1-based layer numbers 6, 9, ... (from 9 when there
// are more than 15 layers) up to num_layers.
std::vector<std::int64_t> retro_layer_numbers(std::int64_t num_layers);

// The [model] keys: the shared transformer keys and Retro's (Megatron's --retro-* arguments).
void declare_retro_config(config::TableSchema& schema);
RetroConfig parse_retro_config(const config::ConfigTable& table);

class RetroModel : public nn::LanguageModel {
 public:
  explicit RetroModel(RetroConfig config);

  SampleSpec input_fields() const override;
  std::string describe() const override;
  const RetroConfig& retro_config() const { return retro_; }

 protected:
  void prepare(const ModelBuildInfo& info) override;
  nn::LayerSpec layer_spec(std::int64_t layer) const override;
  std::uint64_t declare_pre_process(nn::ParamFactory& factory) override;
  // GPT's inputs and the retrieval encoder's output buffer (r k, B l, h), zeroed, with its
  // gradient collected: the retriever layer fills it, every Retro layer reads it.
  nn::LayerInputs layer_inputs(const nn::LayerContext& ctx, const Batch& batch) override;
  Tensor pre_forward(const nn::LayerContext& ctx, const Batch& batch, nn::LayerInputs& inputs,
                     std::unique_ptr<ProcessState>& state) override;
  void pre_backward(const nn::LayerContext& ctx, ProcessState* state, const Tensor& dx) override;

 private:
  struct NeighborState;
  // The neighbour tokens (B, l, k, r) checked against the model's chunk shape and the batch.
  void check_neighbors(const Tensor& neighbors, std::int64_t batch) const;
  std::int64_t chunks_per_sample() const;

  RetroConfig retro_;
  std::vector<std::int64_t> retro_layers_;  // 0-based
};

}  // namespace megatron::retro
