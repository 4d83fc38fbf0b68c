// Megatron-core's T5Model (local spec) on the core's layer stacks: a shared word embedding (with
// learned absolute positions, rope or T5's relative position bias), a bidirectional encoder whose
// final norm gives the memory, a causal decoder whose layers cross-attend to it, and the LM head
// tied to the word embeddings plus `lm_head.output_layer.bias`, trained with "lm loss".
#pragma once

#include <cstdint>
#include <map>
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

// Under pipeline parallelism T5 runs whole encoder stages then whole decoder stages (Megatron's
// encoder-and-decoder model type): every decoder stage receives the encoder output beside its
// hidden states and returns its gradient; the first decoder stage embeds the decoder tokens with
// its own copy of the shared embedding.
class T5Model : public Model {
 public:
  explicit T5Model(T5Config config);

  SampleSpec input_fields() const override;
  void build(const ModelBuildInfo& info) override;
  ParameterSet& parameters() override { return params_; }
  StepResult step(const Batch& batch, const StepOptions& options) override;
  ChunkOutput forward_chunk(int chunk, std::int64_t micro_batch, const Batch& batch,
                            const NamedTensors& input, const StepOptions& options) override;
  NamedTensors backward_chunk(int chunk, std::int64_t micro_batch, const NamedTensors& output_grad,
                              const StepOptions& options) override;
  // Encoder stages after the first receive "hidden" (Se, B, h); the first decoder stage
  // "encoder_output" (Se, B, h); later decoder stages "hidden" (Sd, B, h) and "encoder_output"
  // (sequence shards of Se / tp, Sd / tp under sequence parallelism).
  SampleSpec stage_inputs(int virtual_stage, std::int64_t micro_batch_size) const override;
  double flops_per_iteration(std::int64_t samples) const override;
  ModelDimensions dimensions() const override;
  std::string describe() const override;

  const T5Config& config() const { return config_; }
  std::int64_t padded_vocab_size() const { return padded_vocab_; }
  std::int64_t encoder_seq_length() const { return enc_seq_; }
  std::int64_t decoder_seq_length() const { return dec_seq_; }

 private:
  // What one pipeline stage holds (one stage: everything).
  struct StageRole {
    LayerRange encoder, decoder;  // layers of each stack, numbered within the stack; count 0: none
    bool encoder_embedding = false, encoder_norm = false;
    bool decoder_embedding = false, head = false;
  };
  // One stack (encoder or decoder) of a micro-batch: its inputs, what backward needs and the
  // gradients its layers add into (the relative position bias's, the memory's).
  struct StackRun {
    Tensor ids;  // (S, B) i32, when this stage embeds
    nn::LayerInputs inputs;
    nn::LayerStack::State state;
    Tensor x_rows;  // the last layer's output (rows, h), input of a final norm
    nn::Norm::Saved norm_saved;
    Tensor bias_grad;
  };
  struct Pending {
    StackRun encoder, decoder;
    Tensor memory, dmemory;  // decoder stages: the encoder output and its gradient
    Tensor dnormed;          // the last stage: the loss's gradient w.r.t. the decoder output
  };
  StageRole stage_role(const ModelBuildInfo& info) const;
  void declare_all(nn::ParamFactory& factory, const StageRole& role, int pp_size);
  nn::ModelConfig stack_config(std::int64_t layers) const;
  // Embeds (or takes `received`), runs this stage's layers of one stack; returns the last
  // layer's output (S_local, B, h).
  Tensor forward_stack(const nn::LayerContext& ctx, bool encoder, const Batch& batch,
                       const Tensor* received, const StepOptions& options, Pending& p);
  // Backward of forward_stack from dy; returns the gradient of `received` (undefined when this
  // stage embedded).
  Tensor backward_stack(const nn::LayerContext& ctx, bool encoder, Tensor dy,
                        const StepOptions& options, StackRun& run);
  Tensor final_norm_forward(Backend& be, bool encoder, const Tensor& y, StackRun& run);
  Tensor final_norm_backward(Backend& be, bool encoder, const Tensor& dnormed, StackRun& run);
  nn::LayerContext context(const StepOptions& options) const;
  Parameter& output_weight();
  std::int64_t local_seq(std::int64_t s) const { return tp_.sp() ? s / tp_.size : s; }

  T5Config config_;
  ModelBuildInfo info_;
  nn::TensorParallelism tp_;
  StageRole role_;
  int split_rank_ = 0;  // the first decoder stage under pipeline parallelism
  std::int64_t padded_vocab_ = 0, enc_seq_ = 0, dec_seq_ = 0;
  ParameterSet params_, probe_params_;
  nn::Embedding embedding_;
  Parameter* word_copy_ = nullptr;  // the last stage's copy of the tied word embedding
  nn::RelativePositionBias encoder_bias_, decoder_bias_;
  nn::LayerStack encoder_, decoder_;
  nn::Norm encoder_norm_, decoder_norm_;
  Parameter* output_layer_weight_ = nullptr;  // untied only
  Parameter* output_bias_ = nullptr;          // tied only (Megatron's T5LMHead)
  std::optional<nn::RotaryTables> encoder_rotary_, decoder_rotary_;
  std::map<std::pair<int, std::int64_t>, std::unique_ptr<Pending>> pending_;
  // Parameters reported together to the training loop's hooks: this stage's embeddings and
  // position tables (needed first, ready last), the encoder's final norm, the head.
  std::vector<Parameter*> embedding_params_, encoder_norm_params_, head_params_;
};

}  // namespace megatron::t5
