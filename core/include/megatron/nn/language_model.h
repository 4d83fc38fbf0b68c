// A decoder-only language model on the core's layer stack: Megatron-core's LanguageModelEmbedding
// (word embeddings, learned positions or none, rotary from the config), the layers a subclass's
// spec chooses, the final norm, the output layer (tied to the word embeddings or its own) and the
// masked cross-entropy "lm loss" with the per-token outputs zero-shot tasks read. GPT and the
// hybrid Mamba model are this with their own layer specs and descriptions.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "megatron/nn/embedding.h"
#include "megatron/nn/layer_stack_model.h"

namespace megatron::nn {

class LanguageModel : public LayerStackModel {
 public:
  // GPT's dataset fields: tokens, labels, loss_mask, and position_ids / attention_mask when the
  // dataset resets them (reset_position_ids / reset_attention_mask).
  SampleSpec input_fields() const override;

  // Evaluation-mode logits (B, S, padded vocab) on the host, for reference comparisons (one rank,
  // no tensor or pipeline parallelism).
  Tensor logits(const Batch& batch);
  // Incremental decoding (see can_decode / start_decoding; every rank of the model calls it with
  // the same tokens): the logits (B, padded vocab) on the host after the last of `tokens`
  // (B, S_new) i32, the tokens at positions state.past onwards
  // (a prompt, then one token a step); advances state.past. `every_position`: the logits after
  // each of them, (B, S_new, padded vocab) (a prompt's log-probabilities).
  Tensor decode(DecodeState& state, const Tensor& tokens, bool every_position = false);
  // Continuous batching: one new token of each of n sequences at their own positions, states[b]
  // sequence b's (one sequence each; see decode_layers_ragged) -> the logits (n, padded vocab) on
  // the host; advances each state's past.
  Tensor decode_ragged(std::span<DecodeState* const> states, std::span<const std::int32_t> tokens);

 protected:
  // `name` in messages (GPT, Mamba); `final_norm` the final norm's name.
  LanguageModel(ModelConfig config, std::string name, std::string final_norm);

  std::uint64_t declare_pre_process(ParamFactory& factory) override;
  void declare_post_process(ParamFactory& factory, bool with_pre_process) override;
  // Rotary tables, and first_key from the batch's attention_mask (reset_attention_mask).
  LayerInputs layer_inputs(const LayerContext& ctx, const Batch& batch) override;
  Tensor pre_forward(const LayerContext& ctx, const Batch& batch, LayerInputs& inputs,
                     std::unique_ptr<ProcessState>& state) override;
  void pre_backward(const LayerContext& ctx, ProcessState* state, const Tensor& dx) override;
  StepResult post_forward(const LayerContext& ctx, const Batch& batch, const Tensor& normed,
                          const StepOptions& options,
                          std::unique_ptr<ProcessState>& state) override;
  Tensor post_backward(const LayerContext& ctx, ProcessState* state) override;
  // The first stage's embedding (Retro embeds its neighbour tokens with it too).
  const Embedding& embedding() const { return embedding_; }

 private:
  Parameter& output_weight();
  void check_decodable() const;
  // Embeds ids (S, B) on the device whose token (s, b) is at position positions[s * B + b].
  Tensor embed_at(const LayerContext& ctx, const Tensor& ids,
                  const std::vector<std::int32_t>& positions);
  // normed rows (n, h) on the last pipeline stage (undefined on the others) -> logits
  // (n, padded vocab) on the host of every rank.
  Tensor host_logits(Backend& be, const Tensor& normed, std::int64_t n);

  std::string name_;
  Embedding embedding_;                // first virtual stage
  Parameter* output_layer_ = nullptr;  // untied, or the last stage's tied copy
};

}  // namespace megatron::nn
