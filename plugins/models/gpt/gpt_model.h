// Megatron's GPT on the core's layer stack: embedding (word + learned or rotary positions),
// causal pre-norm layers, final norm, tied or separate output layer, masked cross-entropy
// ("lm loss"). Everything else — pipeline chunks, recomputation, hooks, initialisation order,
// tensor and sequence parallelism — is nn::LayerStackModel's.
#pragma once

#include "megatron/nn/embedding.h"
#include "megatron/nn/layer_stack_model.h"

namespace megatron::gpt {

using GptConfig = nn::ModelConfig;
using nn::PositionEmbedding;
using nn::Recompute;
using nn::RecomputeMethod;

class GptModel : public nn::LayerStackModel {
 public:
  explicit GptModel(GptConfig config);

  SampleSpec input_fields() const override;
  std::string describe() const override;

  // Evaluation-mode logits (B, S, padded vocab) on the host, for reference comparisons.
  Tensor logits(const Batch& batch);

 protected:
  // A model with GPT's embedding, output layer and loss around other layers (the hybrid Mamba
  // model): its name in messages and its final norm's name.
  GptModel(GptConfig config, std::string name, std::string final_norm);

  std::uint64_t declare_pre_process(nn::ParamFactory& factory) override;
  void declare_post_process(nn::ParamFactory& factory, bool with_pre_process) override;
  nn::LayerInputs layer_inputs(const nn::LayerContext& ctx, const Batch& batch) override;
  Tensor pre_forward(const nn::LayerContext& ctx, const Batch& batch,
                     std::unique_ptr<ProcessState>& state) override;
  void pre_backward(const nn::LayerContext& ctx, ProcessState* state, const Tensor& dx) override;
  StepResult post_forward(const nn::LayerContext& ctx, const Batch& batch, const Tensor& normed,
                          const StepOptions& options,
                          std::unique_ptr<ProcessState>& state) override;
  Tensor post_backward(const nn::LayerContext& ctx, ProcessState* state) override;

 private:
  Parameter& output_weight();

  nn::Embedding embedding_;            // first virtual stage
  Parameter* output_layer_ = nullptr;  // untied, or the last stage's tied copy
};

}  // namespace megatron::gpt
