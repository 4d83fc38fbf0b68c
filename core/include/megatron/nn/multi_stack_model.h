// A Model made of several layer stacks run one after the other (Megatron's encoder-and-decoder
// model type: T5's encoder then decoder): each stack's first stage runs its pre-process (an
// embedding), its last stage its final norm, whose output is the next stack's `memory`; the last
// stack's final norm feeds the post-process (heads and losses). Under pipeline parallelism every
// stage holds an equal share of the layers of one stack. The machinery — stage roles, pending
// state per micro-batch, the activations and gradients stages exchange, layout-independent
// initialisation, the training loop's parameter hooks — lives here, so a plugin is wiring.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "megatron/model.h"
#include "megatron/nn/layer_stack.h"
#include "megatron/nn/model_config.h"
#include "megatron/nn/norm.h"

namespace megatron::nn {

class MultiStackModel : public Model {
 public:
  // One stack: its layers are `<prefix>.layers.N`, its final norm `<prefix>.final_layernorm`.
  struct StackSpec {
    std::string prefix;
    std::int64_t num_layers = 0;
    std::int64_t seq_length = 0;  // of its activations (before sequence-parallel sharding)
    LayerStack::SpecFn layer_spec;
  };
  // What this stage holds of one stack (one stage: everything).
  struct StackRole {
    LayerRange layers;         // numbered within the stack; count 0: none of it
    bool pre_process = false;  // its first layer: the stack's input is made here
    bool final_norm = false;   // its last layer: its final norm too
  };
  // A plugin's per-micro-batch state of one stack's inputs or of the post-process.
  struct ProcessState {
    virtual ~ProcessState() = default;
  };

  ParameterSet& parameters() final { return params_; }
  ParameterSet* buffers() final { return &buffers_; }
  void end_training_iteration() final;
  void build(const ModelBuildInfo& info) final;
  StepResult step(const Batch& batch, const StepOptions& options) final;
  ChunkOutput forward_chunk(int chunk, std::int64_t micro_batch, const Batch& batch,
                            const NamedTensors& input, const StepOptions& options) final;
  NamedTensors backward_chunk(int chunk, std::int64_t micro_batch, const NamedTensors& output_grad,
                              const StepOptions& options) final;
  // A stage inside stack k receives "hidden" (S_k, B, h) unless it holds the stack's first layer;
  // a stage of stack k > 0 also receives the previous stack's output "<prefix>_output"
  // (S_{k-1}, B, h). Sequence lengths are shards of S / tp under sequence parallelism.
  SampleSpec stage_inputs(int virtual_stage, std::int64_t micro_batch_size) const override;

  const ModelConfig& config() const { return config_; }
  std::int64_t padded_vocab_size() const { return padded_vocab_; }

 protected:
  MultiStackModel(ModelConfig config, std::string name);

  // ---- what a model plugin supplies --------------------------------------------------------
  // Checks the build info and names the stacks, in running order. Called before declaring.
  virtual std::vector<StackSpec> prepare(const ModelBuildInfo& info) = 0;
  // Declares the parameters every stack's inputs need (embeddings, position tables) for the
  // stacks `roles` says this stage holds; returns the dropout sites they use (the same on every
  // stage). Called once for the whole model on the meta device, then for this stage.
  virtual std::uint64_t declare_pre_process(ParamFactory& factory,
                                            const std::vector<StackRole>& roles) = 0;
  // Declares the post-process's parameters (after the last stack's final norm).
  virtual void declare_post_process(ParamFactory& factory, const std::vector<StackRole>& roles) = 0;
  // Adds stack `stack`'s per-micro-batch layer inputs (masks, biases) to `inputs`, which already
  // holds the rotary tables and, for a stack after the first, the previous stack's output as
  // `memory` with its gradient collected. `state` keeps what inputs_backward and pre_backward
  // need.
  virtual void stack_inputs(const LayerContext& ctx, std::size_t stack, const Batch& batch,
                            const StepOptions& options, LayerInputs& inputs,
                            std::unique_ptr<ProcessState>& state) = 0;
  // After the stack's layers ran backward on this stage: the gradients of its inputs' parameters.
  virtual void inputs_backward(const LayerContext& ctx, std::size_t stack, ProcessState* state) {
    (void)ctx, (void)stack, (void)state;
  }
  // On the stack's first stage: batch -> x (S / tp under sequence parallelism, B, h).
  virtual Tensor pre_forward(const LayerContext& ctx, std::size_t stack, const Batch& batch,
                             ProcessState* state) = 0;
  virtual void pre_backward(const LayerContext& ctx, std::size_t stack, ProcessState* state,
                            const Tensor& dx) = 0;
  // As LayerStackModel's: normed (rows, h) of the last stack -> the losses, and its gradient.
  virtual StepResult post_forward(const LayerContext& ctx, const Batch& batch, const Tensor& normed,
                                  const StepOptions& options,
                                  std::unique_ptr<ProcessState>& state) = 0;
  virtual Tensor post_backward(const LayerContext& ctx, ProcessState* state) = 0;

  // ---- what the plugin may use ---------------------------------------------------------------
  const ModelBuildInfo& info() const { return info_; }
  const TensorParallelism& tp() const { return tp_; }
  const std::vector<StackSpec>& stacks() const { return stacks_; }
  // The pipeline stages holding stack `stack` (every stage's number when there is one).
  std::vector<int> stages_of(std::size_t stack) const;
  std::int64_t local_seq(std::int64_t s) const { return tp_.sp() ? s / tp_.size : s; }

  ModelConfig config_;
  std::int64_t padded_vocab_ = 0;

 private:
  struct StackRun {
    LayerInputs inputs;
    std::unique_ptr<ProcessState> state;
    LayerStack::State layers;
    Tensor x_rows;  // the last layer's output (rows, h), input of the final norm
    Norm::Saved norm_saved;
  };
  struct Pending {
    std::vector<StackRun> runs;                 // per stack this stage holds layers of
    std::vector<Tensor> outputs, output_grads;  // per stack: its final-normed output, gradient
    std::unique_ptr<ProcessState> post;
    std::int64_t batch_size = 0;
  };
  std::vector<StackRole> stage_roles(const PipelinePlacement& pipeline) const;
  void declare_all(ParamFactory& factory, const std::vector<StackRole>& roles);
  // The stack whose layers pipeline stage `stage` holds.
  std::size_t stack_at_stage(int stage) const;
  // Runs stack `k` on this stage; returns its last layer's output (S_local, B, h).
  Tensor forward_stack(const LayerContext& ctx, std::size_t k, const Batch& batch,
                       const NamedTensors& input, const StepOptions& options, Pending& p);
  Tensor final_norm_forward(Backend& be, std::size_t k, const Tensor& y, StackRun& run);
  Tensor final_norm_backward(Backend& be, std::size_t k, const Tensor& dnormed, StackRun& run);
  std::string output_name(std::size_t k) const { return stacks_[k].prefix + "_output"; }

  std::string name_;
  ModelBuildInfo info_;
  TensorParallelism tp_;
  std::vector<StackSpec> stacks_;
  std::vector<StackRole> roles_;
  std::vector<LayerStack> layer_stacks_;
  std::vector<Norm> final_norms_;
  std::vector<std::optional<RotaryTables>> rotary_;
  std::int64_t stage_share_ = 0;  // layers per pipeline stage
  ParameterSet params_, probe_params_;
  ParameterSet buffers_;  // the layers' (ParamFactory::declare_buffer)
  std::map<std::int64_t, Pending> pending_;
  // For the hooks: the pre-process's, each stack's final norm's, the post-process's.
  std::vector<Parameter*> pre_params_, post_params_;
  std::vector<std::vector<Parameter*>> norm_params_;
};

}  // namespace megatron::nn
