// Megatron's GPT as a megatron::Model: embedding, pre-norm transformer layers, final norm, tied or
// separate output layer, masked cross-entropy; optional full activation recomputation.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "gpt_config.h"
#include "megatron/model.h"
#include "megatron/nn/embedding.h"
#include "megatron/nn/transformer_layer.h"

namespace megatron::gpt {

class GptModel : public Model {
 public:
  explicit GptModel(GptConfig config) : config_(std::move(config)) {}

  void build(const ModelBuildInfo& info) override;
  ParameterSet& parameters() override { return params_; }
  StepResult step(const Batch& batch, const StepOptions& options) override;
  double flops_per_iteration(std::int64_t samples) const override;
  std::string describe() const override;
  ModelDimensions dimensions() const override;

  // Evaluation-mode logits (B, S, padded vocab) on the host, for reference comparisons.
  Tensor logits(const Batch& batch);

  const GptConfig& config() const { return config_; }
  std::int64_t padded_vocab_size() const { return padded_vocab_; }

 private:
  // Consecutive layers run as one unit; `recompute` ones keep only their input in forward.
  struct Chunk {
    std::int64_t begin = 0, end = 0;
    bool recompute = false;
  };
  std::vector<Chunk> plan_chunks() const;
  Parameter& output_weight();

  GptConfig config_;
  ModelBuildInfo info_;
  std::int64_t padded_vocab_ = 0;
  ParameterSet params_;
  nn::Embedding embedding_;
  std::vector<nn::TransformerLayer> layers_;
  nn::Norm final_layernorm_;
  Parameter* output_layer_ = nullptr;
  std::optional<nn::RotaryTables> rotary_;
  std::vector<Chunk> chunks_;
};

}  // namespace megatron::gpt
