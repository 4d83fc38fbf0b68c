// Megatron-core's T5Model (local spec) on the core's layer stacks: a shared word embedding (with
// learned absolute positions, rope or T5's relative position bias), a bidirectional encoder whose
// final norm gives the memory, a causal decoder whose layers cross-attend to it, and the LM head
// tied to the word embeddings plus `lm_head.output_layer.bias`, trained with "lm loss".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/nn/embedding.h"
#include "megatron/nn/layer_stack.h"
#include "megatron/nn/model_config.h"
#include "megatron/nn/norm.h"
#include "megatron/nn/relative_position_bias.h"
#include "megatron/nn/tensor_parallel.h"

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

class T5Model : public Model {
 public:
  explicit T5Model(T5Config config);

  SampleSpec input_fields() const override;
  void build(const ModelBuildInfo& info) override;
  ParameterSet& parameters() override { return params_; }
  StepResult step(const Batch& batch, const StepOptions& options) override;
  double flops_per_iteration(std::int64_t samples) const override;
  ModelDimensions dimensions() const override;
  std::string describe() const override;

  const T5Config& config() const { return config_; }
  std::int64_t padded_vocab_size() const { return padded_vocab_; }
  std::int64_t encoder_seq_length() const { return enc_seq_; }
  std::int64_t decoder_seq_length() const { return dec_seq_; }

 private:
  // One stack (encoder or decoder) of a micro-batch: its inputs, what backward needs and the
  // gradients its layers add into (the relative position bias's).
  struct StackRun {
    Tensor ids;  // (S, B) i32
    nn::LayerInputs inputs;
    nn::LayerStack::State state;
    Tensor x_rows;  // the last layer's output (rows, h), input of the final norm
    nn::Norm::Saved norm_saved;
    Tensor bias_grad;
  };
  void declare_all(nn::ParamFactory& factory);
  nn::ModelConfig stack_config(std::int64_t layers) const;
  // Embedding, layers and final norm of one stack; returns the normed output (S_local, B, h).
  Tensor run_stack(const nn::LayerContext& ctx, bool encoder, const Batch& batch,
                   const Tensor& memory, const Tensor& memory_mask, Tensor* memory_grad,
                   const StepOptions& options, StackRun& run);
  // Backward of run_stack from the gradient of its normed output; reports its parameters.
  void backward_stack(const nn::LayerContext& ctx, bool encoder, const Tensor& dnormed,
                      const StepOptions& options, StackRun& run);
  nn::LayerContext context(const StepOptions& options) const;
  Parameter& output_weight();

  T5Config config_;
  ModelBuildInfo info_;
  nn::TensorParallelism tp_;
  std::int64_t padded_vocab_ = 0, enc_seq_ = 0, dec_seq_ = 0;
  ParameterSet params_, probe_params_;
  nn::Embedding embedding_;
  nn::RelativePositionBias encoder_bias_, decoder_bias_;
  nn::LayerStack encoder_, decoder_;
  nn::Norm encoder_norm_, decoder_norm_;
  Parameter* output_layer_weight_ = nullptr;  // untied only
  Parameter* output_bias_ = nullptr;          // tied only (Megatron's T5LMHead)
  std::optional<nn::RotaryTables> encoder_rotary_, decoder_rotary_;
  // Parameters reported together to the training loop's hooks.
  std::vector<Parameter*> embedding_params_, encoder_bias_params_, decoder_bias_params_,
      encoder_norm_params_, head_params_;
};

}  // namespace megatron::t5
