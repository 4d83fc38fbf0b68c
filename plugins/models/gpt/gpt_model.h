// Megatron's GPT as a megatron::Model: embedding, pre-norm transformer layers, final norm, tied or
// separate output layer, masked cross-entropy; optional full activation recomputation; tensor and
// sequence parallelism through the core layers (ModelBuildInfo's tensor-parallel group).
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
  void group_parameters();
  // Embedding, layers and final norm of (S, B) token ids. With `keep`, what backward needs is
  // kept (a recomputed chunk keeps only its input); without, only the outputs.
  struct Forward {
    std::vector<nn::TransformerLayer::Saved> saved;  // per layer
    std::vector<Tensor> chunk_inputs;                // per chunk
    Tensor x_rows;                                   // last layer's output (S*B, h)
    Tensor normed;                                   // final norm of it
    nn::Norm::Saved final_saved;
  };
  Forward forward(const nn::LayerContext& ctx, const Tensor& ids, bool keep);
  Parameter& output_weight();
  static nn::TensorParallelism tensor_parallelism(const ModelBuildInfo& info);
  // Sequence length of the activations between tensor-parallel regions.
  std::int64_t local_seq(std::int64_t s) const { return tp_.sp() ? s / tp_.size : s; }

  GptConfig config_;
  ModelBuildInfo info_;
  nn::TensorParallelism tp_;
  std::int64_t padded_vocab_ = 0;
  ParameterSet params_;
  nn::Embedding embedding_;
  std::vector<nn::TransformerLayer> layers_;
  nn::Norm final_layernorm_;
  Parameter* output_layer_ = nullptr;
  std::optional<nn::RotaryTables> rotary_;
  std::vector<Chunk> chunks_;
  // For StepOptions::grads_ready: each layer's parameters, and those complete right after the
  // loss (final norm, untied output layer) and after the embedding (embeddings).
  std::vector<std::vector<Parameter*>> layer_params_;
  std::vector<Parameter*> head_params_, embedding_params_;
};

}  // namespace megatron::gpt
