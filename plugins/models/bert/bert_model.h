// Megatron-core's BertModel (local spec) on the core's layer stack: word + position + token-type
// embeddings, bidirectional pre-norm layers with the samples' padding mask, final norm, the LM
// head (dense -> gelu -> LayerNorm -> tied projection + output bias) with the masked-LM loss
// ("lm loss") and, with the binary head, the pooler (tanh of a dense layer on token 0) and the
// sentence-order head ("sop loss"). With a task head selected (fine-tuning: Megatron's legacy
// Classification and MultipleChoice) the pooler feeds dropout and a classification_head or
// multichoice_head instead, and the pretraining heads are not declared.
#pragma once

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/nn/embedding.h"
#include "megatron/nn/layer_stack_model.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/lm_head.h"
#include "megatron/nn/pooled_heads.h"

namespace megatron::bert {

struct BertConfig {
  nn::ModelConfig model;
  // Megatron's --bert-no-binary-head sets this false: no token types, pooler or SOP loss.
  bool binary_head = true;
};

void declare_bert_config(config::TableSchema& schema);
BertConfig parse_bert_config(const config::ConfigTable& table);

class BertModel : public nn::LayerStackModel {
 public:
  explicit BertModel(BertConfig config);

  SampleSpec input_fields() const override;
  std::string describe() const override;
  TaskHeadParameters select_head(const TaskHead& head) override;
  // A multiple-choice micro-batch of B samples runs B x choices sequences.
  SampleSpec stage_inputs(int virtual_stage, std::int64_t micro_batch_size) const override;

 protected:
  void prepare(const ModelBuildInfo& info) override;
  std::string context_parallel_refusal() const override;
  nn::LayerSpec layer_spec(std::int64_t layer) const override;
  std::uint64_t declare_pre_process(nn::ParamFactory& factory) override;
  void declare_post_process(nn::ParamFactory& factory, bool with_pre_process) override;
  nn::LayerInputs layer_inputs(const nn::LayerContext& ctx, const Batch& batch) override;
  Tensor pre_forward(const nn::LayerContext& ctx, const Batch& batch, nn::LayerInputs& inputs,
                     std::unique_ptr<ProcessState>& state) override;
  void pre_backward(const nn::LayerContext& ctx, ProcessState* state, const Tensor& dx) override;
  StepResult post_forward(const nn::LayerContext& ctx, const Batch& batch, const Tensor& normed,
                          const StepOptions& options,
                          std::unique_ptr<ProcessState>& state) override;
  Tensor post_backward(const nn::LayerContext& ctx, ProcessState* state) override;

 private:
  struct PostState;  // bert_heads.cpp
  // A per-sequence field as (sequences, S): multiple-choice samples hold every choice's.
  Tensor sequences(const Batch& batch, const char* field) const {
    return nn::TaskHeadLayer::sequences(head_, batch, field, "BERT");
  }

  bool binary_head_ = true;
  TaskHead head_;
  nn::Embedding embedding_;
  Parameter* output_copy_ = nullptr;  // the last stage's tied copy under pipeline parallelism
  nn::TransformLmHead lm_head_;
  Parameter* output_bias_ = nullptr;
  nn::Linear pooler_, binary_head_layer_;  // pretraining with the binary head
  nn::TaskHeadLayer task_head_;            // fine-tuning
};

}  // namespace megatron::bert
