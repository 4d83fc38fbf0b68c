// Megatron-core's T5Model (local spec) on the core's layer stacks: a shared word embedding (with
// learned absolute positions, rope or T5's relative position bias), a bidirectional encoder whose
// final norm gives the memory, a causal decoder whose layers cross-attend to it, and the LM head
// tied to the word embeddings plus `lm_head.output_layer.bias`, trained with "lm loss".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/nn/embedding.h"
#include "megatron/nn/model_config.h"
#include "megatron/nn/multi_stack_model.h"
#include "megatron/nn/relative_position_bias.h"

namespace megatron::t5 {

struct T5Config {
  // The shared keys; model.transformer.num_layers is the decoder's layer count.
  nn::ModelConfig model;
  std::int64_t encoder_num_layers = 2;
  std::int64_t decoder_num_layers = 2;
  std::int64_t relative_attention_num_buckets = 32;
  std::int64_t relative_attention_max_distance = 128;
};

void declare_t5_config(config::TableSchema& schema);
T5Config parse_t5_config(const config::ConfigTable& table);

// Under pipeline parallelism T5 runs whole encoder stages then whole decoder stages (Megatron's
// encoder-and-decoder model type, the core's MultiStackModel): every decoder stage receives the
// encoder output beside its hidden states and returns its gradient; the first decoder stage
// embeds the decoder tokens with its own copy of the shared embedding.
class T5Model : public nn::MultiStackModel {
 public:
  explicit T5Model(T5Config config);

  SampleSpec input_fields() const override;
  double flops_per_iteration(std::int64_t samples) const override;
  ModelDimensions dimensions() const override;
  std::string describe() const override;

  const T5Config& t5_config() const { return t5_; }
  std::int64_t encoder_seq_length() const { return enc_seq_; }
  std::int64_t decoder_seq_length() const { return dec_seq_; }

 private:
  std::vector<StackSpec> prepare(const ModelBuildInfo& info) override;
  std::uint64_t declare_pre_process(nn::ParamFactory& factory,
                                    const std::vector<StackRole>& roles) override;
  void declare_post_process(nn::ParamFactory& factory,
                            const std::vector<StackRole>& roles) override;
  void stack_inputs(const nn::LayerContext& ctx, std::size_t stack, const Batch& batch,
                    const StepOptions& options, nn::LayerInputs& inputs,
                    std::unique_ptr<ProcessState>& state) override;
  void inputs_backward(const nn::LayerContext& ctx, std::size_t stack,
                       ProcessState* state) override;
  Tensor pre_forward(const nn::LayerContext& ctx, std::size_t stack, const Batch& batch,
                     ProcessState* state) override;
  void pre_backward(const nn::LayerContext& ctx, std::size_t stack, ProcessState* state,
                    const Tensor& dx) override;
  StepResult post_forward(const nn::LayerContext& ctx, const Batch& batch, const Tensor& normed,
                          const StepOptions& options,
                          std::unique_ptr<ProcessState>& state) override;
  Tensor post_backward(const nn::LayerContext& ctx, ProcessState* state) override;
  // Marks a shared parameter's holders (pipeline parallelism only).
  void share(Parameter* p, std::vector<int> holders) const;

  T5Config t5_;
  std::int64_t enc_seq_ = 0, dec_seq_ = 0;
  nn::Embedding embedding_;
  Parameter* word_copy_ = nullptr;            // the last stage's copy of the tied word embedding
  nn::RelativePositionBias biases_[2];        // encoder's, decoder's
  Parameter* output_layer_weight_ = nullptr;  // untied only
  Parameter* output_bias_ = nullptr;          // tied only (Megatron's T5LMHead)
};

}  // namespace megatron::t5
