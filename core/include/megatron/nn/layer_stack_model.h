// A Model made of a pre-process (embedding, first virtual stage), a LayerStack, the final norm
// and a post-process (heads and losses, last virtual stage): the machinery every such model
// needs — tensor-parallel checks, pipeline chunks and their pending state, layout-independent
// initialisation, the params_needed / grads_ready hooks, named stage activations — lives here, so
// a model plugin (GPT, BERT, a third party's) is wiring: it declares and runs its two processes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "megatron/model.h"
#include "megatron/nn/core_blocks.h"
#include "megatron/nn/layer_stack.h"
#include "megatron/nn/model_config.h"
#include "megatron/nn/norm.h"

namespace megatron::nn {

// Megatron's activation layout for per-token data: (B, S) -> (S, B), row s * B + b, on the
// backend's device.
Tensor sequence_major(Backend& backend, const Tensor& batch_major);

// A dataset's padding mask (B, S) i32, non-zero on real tokens (Megatron's padding_mask,
// enc_mask, dec_mask), as the attention ops take it: (B, S) u8 on the backend's device, non-zero
// = padding.
Tensor key_padding_from_mask(Backend& backend, const Tensor& mask);
// The layers' context for a step of a model built with `info`.
LayerContext layer_context(const ModelBuildInfo& info, const StepOptions& options);

// ---- pieces every model's build shares (LayerStackModel's, and T5's two stacks) ----------------
// This rank's tensor parallelism from the build info, checked (rank in range, the communicator
// there and agreeing, every sequence length in `seq_lengths` divisible under sequence
// parallelism); `name` prefixes the errors.
TensorParallelism model_tensor_parallelism(const ModelBuildInfo& info, const std::string& name,
                                           const std::vector<std::int64_t>& seq_lengths);
// The model's expert-parallel group from the build info; throws Error on an inconsistent one.
ExpertParallelism model_expert_parallelism(const ModelBuildInfo& info, const std::string& name);
// Gives each parameter of `params` its index in `probe` (the whole model declared on the meta
// device), so parameter k draws Philox stream k whatever the layout.
void assign_init_indices(ParameterSet& params, const ParameterSet& probe, const std::string& name);
// Model::step of a model held whole by one stage (`whole`): its one chunk's forward and backward
// as micro-batch -1; otherwise an error naming the model.
StepResult step_whole_model(Model& model, const std::string& name, bool whole, const Batch& batch,
                            const StepOptions& options);
// "GPT: 4 layers, hidden 128, ..., N parameters on this rank (tensor-parallel rank ...)".
std::string describe_model_layout(const std::string& architecture, std::int64_t numel,
                                  const TensorParallelism& tp, const PipelinePlacement& pipeline);

class LayerStackModel : public Model {
 public:
  // A plugin's per-micro-batch state of its pre- or post-process, kept for backward.
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
  // Every boundary passes "hidden": (S / tp under sequence parallelism, B, h).
  SampleSpec stage_inputs(int virtual_stage, std::int64_t micro_batch_size) const override;
  ModelDimensions dimensions() const override;
  // Megatron's num_floating_point_operations (training.py), which it reports for every model.
  double flops_per_iteration(std::int64_t samples) const override;
  // The MoE layers' load-balancing and z losses, when the stack has MoE layers.
  std::vector<std::string> auxiliary_loss_names() const override;

  const ModelConfig& config() const { return config_; }
  std::int64_t padded_vocab_size() const { return padded_vocab_; }
  // Evaluation-mode forward of the whole model (one stage) up to the final norm: the normed
  // hidden states (S * B rows, h), row s * B + b, on the model's device.
  Tensor final_hidden(const Batch& batch);

  // Incremental decoding (any tensor and pipeline layout, no sequence parallelism): whether every
  // held layer's blocks can (Mixer::decoding), and the caches of this rank's layers for `batch`
  // sequences of up to `max_tokens` tokens (at most the sequence length the model was built for).
  bool can_decode() const;
  struct DecodeState {
    std::vector<Layer::Caches> caches;  // per layer of the model; empty where held elsewhere
    std::int64_t past = 0;              // tokens decoded so far
    std::int64_t batch = 0, max_tokens = 0;
  };
  DecodeState start_decoding(std::int64_t batch, std::int64_t max_tokens) const;

 protected:
  // `stack_prefix` names the layers (`decoder` -> decoder.layers.N, decoder.final_layernorm;
  // `final_norm` names the last norm: Megatron's MambaStack calls it final_norm).
  LayerStackModel(ModelConfig config, std::string name, std::string stack_prefix,
                  std::string final_norm = "final_layernorm");

  // ---- what a model plugin supplies --------------------------------------------------------
  // Called once before declaring, with the build info (e.g. to check fields or sequence length).
  // Positions are already resolved: config_.max_position_embeddings is the table's size (the
  // sequence length when it was 0) and rotary_tables() are built when the config rotates.
  virtual void prepare(const ModelBuildInfo& info) { (void)info; }
  // Why this model cannot have its sequences split over a context-parallel group (build refuses
  // context_parallel_size > 1 with it), or "" when it can. Default: not yet supported.
  virtual std::string context_parallel_refusal() const;
  // The blocks of layer `layer` (default: causal self-attention, then the MLP).
  virtual LayerSpec layer_spec(std::int64_t layer) const;
  // Declares the pre-process's parameters; its dropout sites start at 0 and it returns how many
  // it took. May be called more than once (the last call's parameters are the real ones).
  virtual std::uint64_t declare_pre_process(ParamFactory& factory) = 0;
  // Declares the post-process's parameters (after the final norm). `with_pre_process`: this
  // stage also holds the pre-process (a tied embedding is shared, not copied).
  virtual void declare_post_process(ParamFactory& factory, bool with_pre_process) = 0;
  // Per micro-batch inputs of the layers (default: the rotary tables, no mask).
  virtual LayerInputs layer_inputs(const LayerContext& ctx, const Batch& batch);
  // batch -> x (S / tp under sequence parallelism, B, h) in param dtype. May add the layer
  // inputs it computes to `inputs` (Retro's neighbour embeddings), asking for their gradients
  // there and keeping the accumulators in `state` for pre_backward; only the first stage runs
  // it, so only that stage's layers see them.
  virtual Tensor pre_forward(const LayerContext& ctx, const Batch& batch, LayerInputs& inputs,
                             std::unique_ptr<ProcessState>& state) = 0;
  // Accumulates the pre-process's parameter gradients from dx (shaped as pre_forward's output).
  virtual void pre_backward(const LayerContext& ctx, ProcessState* state, const Tensor& dx) = 0;
  // normed (rows = S / tp * B under sequence parallelism, h) -> the losses. With
  // options.backward, keeps what post_backward needs.
  virtual StepResult post_forward(const LayerContext& ctx, const Batch& batch, const Tensor& normed,
                                  const StepOptions& options,
                                  std::unique_ptr<ProcessState>& state) = 0;
  // The gradient of options.loss_scale * objective with respect to `normed` (same shape);
  // accumulates the post-process's parameter gradients.
  virtual Tensor post_backward(const LayerContext& ctx, ProcessState* state) = 0;

  // ---- what the plugin may use ---------------------------------------------------------------
  // Evaluation mode: the layers (cached) and the final norm on x (S_new, B, h) from embed(), the
  // S_new = new_tokens tokens after the state's past ones -> normed rows (S_new * B, h); the
  // rotary tables in `inputs` must be those positions'. Does not advance state.past. With
  // pipeline stages every rank of the pipeline calls it: embed() runs on the first stage only,
  // each other chunk receives its input from the previous virtual stage, and only the last stage
  // returns the normed rows (the others an undefined tensor).
  Tensor decode_layers(const LayerContext& ctx, std::int64_t new_tokens,
                       const std::function<Tensor()>& embed, const LayerInputs& inputs,
                       DecodeState& state) const;
  // Continuous batching: embed() gives x (1, n, h), one new token of each of n sequences,
  // states[b] sequence b's own (one sequence each, at its own past); `columns[b]` its positions'
  // inputs -> normed rows (n, h) (pipeline stages as decode_layers). Does not advance the pasts.
  Tensor decode_layers_ragged(const LayerContext& ctx, const std::function<Tensor()>& embed,
                              const LayerInputs& shared, const std::vector<LayerInputs>& columns,
                              std::span<DecodeState* const> states) const;
  const ModelBuildInfo& info() const { return info_; }
  const TensorParallelism& tp() const { return tp_; }
  LayerContext context(const StepOptions& options) const;
  // The rotary tables (S, rotary_dim) for the data's sequence length, or nullptr without rotary
  // positions (and on the meta device). Under context parallelism, the rows of this rank's
  // positions (context_positions), (S / cp, rotary_dim).
  const RotaryTables* rotary_tables() const { return rotary_ ? &*rotary_ : nullptr; }
  // The tokens of each sequence this rank holds: all of them, or its two chunks under context
  // parallelism (seq_length / cp).
  std::int64_t held_seq_length() const { return info_.seq_length / info_.cp_size; }
  // Sequence length of the activations between tensor-parallel regions, from the held length.
  std::int64_t local_seq(std::int64_t s) const { return tp_.sp() ? s / tp_.size : s; }
  bool holds_pre_process() const { return info_.pipeline.is_first_virtual_stage(0); }
  bool holds_post_process() const {
    return info_.pipeline.is_last_virtual_stage(info_.pipeline.num_chunks() - 1);
  }
  // The output projection's weight of a model that may tie it to the word embeddings (vocabulary
  // rows padded): an untied `output_layer.weight`; or, tied, on a last stage without the
  // embedding, that stage's own copy of `embedding.word_embeddings.weight` (Megatron's shared
  // embedding: same name, so the same initialisation, kept equal by summing the copies'
  // gradients). nullptr: tied on a stage that holds the embedding itself.
  Parameter* declare_output_weight(ParamFactory& factory, bool with_pre_process, bool untied);
  // On the first stage: marks the word embeddings as shared with the last stage's copy when they
  // are tied and the pipeline has several stages.
  void share_word_embeddings(Parameter& word_embeddings, bool untied);
  // The first dropout site after the pre-process's and every layer's, the same on every stage:
  // the post-process's own dropout (a task head's) uses it and the ones after it.
  std::uint64_t post_process_dropout_site() const { return pre_sites_ + stack_.dropout_sites(); }
  // "GPT: 4 layers, hidden 128, ..." with this rank's parameter count and place.
  std::string describe_layout(const std::string& architecture) const;

  ModelConfig config_;
  std::int64_t padded_vocab_ = 0;

 private:
  struct Pending {
    LayerInputs inputs;
    std::unique_ptr<ProcessState> pre, post;
    LayerStack::State stack;
    Tensor x_rows;  // the last layer's output (rows, h), input of the final norm
    Norm::Saved final_saved;
  };
  void declare_all(ParamFactory& factory, const std::vector<LayerRange>& chunks, bool pre,
                   bool post);
  void check_context_parallelism(const ModelBuildInfo& info) const;
  // Decoding's walk through this rank's chunks in pipeline order: x of `shape` from embed() on
  // the first virtual stage, else from the previous one; run(chunk, x) each chunk's layers; the
  // output to the next virtual stage, or the final norm's rows on the last.
  Tensor decode_stages(const LayerContext& ctx, const Shape& shape,
                       const std::function<Tensor()>& embed,
                       const std::function<Tensor(int, const Tensor&)>& run) const;

  std::string name_, stack_prefix_, final_norm_name_;
  ModelBuildInfo info_;
  TensorParallelism tp_;
  ParameterSet params_;
  ParameterSet probe_params_;  // the whole model on the meta device (initialisation order)
  ParameterSet buffers_;       // the layers' (ParamFactory::declare_buffer)
  LayerStack stack_;
  Norm final_norm_;
  std::optional<RotaryTables> rotary_;
  std::uint64_t pre_sites_ = 0;
  std::map<std::pair<int, std::int64_t>, Pending> pending_;
  // For the hooks: the pre-process's parameters and the post-process's (final norm included).
  std::vector<Parameter*> pre_params_, post_params_;
};

}  // namespace megatron::nn
