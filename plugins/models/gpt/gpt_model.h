// Megatron's GPT: the core's decoder-only language model (embedding, word + learned or rotary
// positions; causal pre-norm layers; final norm; tied or separate output layer; masked
// cross-entropy "lm loss") with the transformer layer spec. Everything else — pipeline chunks,
// recomputation, hooks, initialisation order, tensor and sequence parallelism — is the core's.
#pragma once

#include "megatron/nn/language_model.h"

namespace megatron::gpt {

using GptConfig = nn::ModelConfig;
using nn::PositionEmbedding;
using nn::Recompute;
using nn::RecomputeMethod;

class GptModel : public nn::LanguageModel {
 public:
  explicit GptModel(GptConfig config);

  std::string describe() const override;

 protected:
  // GPT's sequences split over a context-parallel group, without MoE layers for now.
  std::string context_parallel_refusal() const override;
};

}  // namespace megatron::gpt
