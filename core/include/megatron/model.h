// The interface of model plugins: parameters declared as data, the sample fields a model reads,
// and forward/backward over one micro-batch returning named losses. The training loop owns
// everything else. Most models derive from nn::LayerStackModel (megatron/nn/layer_stack_model.h),
// which implements this interface for a stack of layers between a pre- and a post-process.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "megatron/batch.h"
#include "megatron/nn/parameter.h"
#include "megatron/plugin.h"
#include "megatron/tensor/tensor.h"

namespace megatron {

class Communicator;

// Layers [first, first + count) of the whole model, by global layer number.
struct LayerRange {
  std::int64_t first = 0;
  std::int64_t count = 0;
  bool operator==(const LayerRange&) const = default;
};

// Where a model instance sits in a pipeline: its stage and the layers of each of its model chunks
// (several with the interleaved schedule). Virtual stage of chunk c on rank r: c * size + r; the
// first virtual stage runs the pre-process (embedding), the last the post-process (loss).
struct PipelinePlacement {
  int rank = 0;
  int size = 1;
  std::vector<LayerRange> chunks;  // empty: one chunk holding every layer
  // The pipeline group (device communicator, owned by the ParallelState) when size > 1: the
  // trainer's schedule passes training activations itself; incremental decoding passes its own.
  Communicator* comm = nullptr;

  int num_chunks() const { return chunks.empty() ? 1 : static_cast<int>(chunks.size()); }
  bool is_first_virtual_stage(int chunk) const { return rank == 0 && chunk == 0; }
  bool is_last_virtual_stage(int chunk) const {
    return rank == size - 1 && chunk == num_chunks() - 1;
  }
  // The virtual stage of `chunk` on this rank.
  int virtual_stage(int chunk) const { return chunk * size + rank; }
};

// What the host tells a model when it builds it (after the dataset is known).
struct ModelBuildInfo {
  std::int64_t vocab_size = 0;  // unpadded tokenizer vocabulary; the model pads it
  std::int64_t seq_length = 0;  // sequence length of the samples it will see
  SampleSpec sample_fields;     // the dataset's fields (names, dtypes, per-sample shapes)
  Device device = Device::cpu();
  DType param_dtype = DType::f32;    // f32 normally, f64 for gradient checks
  DType compute_dtype = DType::f32;  // bf16/f16: GEMM inputs cast to it (mixed precision)
  std::uint64_t seed = 1234;
  // Tensor parallelism: this rank's place in its tensor-parallel group and the group's
  // communicator (owned by the ParallelState, outliving the model). tp_size 1: unsplit. On the
  // meta device (`plan`) the communicator may be null: shards are declared, never exchanged.
  Communicator* tensor_comm = nullptr;
  int tp_rank = 0;
  int tp_size = 1;
  bool sequence_parallel = false;  // activations outside the TP regions on sequence shards
  // Expert parallelism (MoE layers): this rank's place in its expert-parallel group and the
  // group's communicator (owned by the ParallelState). ep_size 1: every rank holds every expert.
  Communicator* expert_comm = nullptr;
  int ep_rank = 0;
  int ep_size = 1;
  int etp_size = 1;  // expert_tensor_parallel_size, resolved (experts split over it: not yet)
  // The data x context group (the data-parallel one when context_parallel_size is 1), for
  // per-iteration statistics summed over every token of the iteration (MoE's expert-bias token
  // counts). Null: one rank in that group (or `plan`).
  Communicator* data_comm = nullptr;
  // Context parallelism: this rank's place in its context-parallel group and the group's device
  // communicator; each rank holds two chunks of every sequence (nn/context_parallelism.h), and
  // seq_length stays the whole sequence's. cp_size 1: whole sequences.
  Communicator* context_comm = nullptr;
  int cp_rank = 0;
  int cp_size = 1;
  PipelinePlacement pipeline;  // default: the whole model, one stage
};

struct StepOptions {
  bool backward = true;     // false: forward only (evaluation)
  bool training = true;     // false: dropout off
  float loss_scale = 1.0f;  // gradients are of loss_scale * the model's objective
  // Distinguishes dropout streams: the same (iteration, micro_batch) gives the same masks,
  // including when a layer is recomputed.
  std::uint64_t dropout_offset = 0;
  std::uint64_t dropout_seed = 1234;  // [training] seed, or the checkpoint's on resume
  // Called during backward, as soon as these parameters' gradients of this micro-batch are
  // complete (a layer's after its backward; a tied embedding only after its last use), so the
  // training loop can start reducing them while backward goes on. Every parameter is reported
  // exactly once per step. Empty: not called.
  std::function<void(const std::vector<Parameter*>&)> grads_ready;
  // Called during forward just before these parameters' values are first read (the embedding's,
  // each layer's, the head's, in that order), so the training loop can finish updating them
  // while earlier layers compute (the distributed optimizer's overlapped all-gather). Empty: not
  // called.
  std::function<void(const std::vector<Parameter*>&)> params_needed;
  // Forward only: also return per-sample predictions in StepResult::outputs (evaluation tasks).
  bool outputs = false;
};

// One named loss (or metric) of a micro-batch: what it sums and over how many items, so the
// trainer can reduce it over micro-batches and data-parallel ranks as sum(sum) / sum(count).
// A token-averaged loss gives (sum over tokens, tokens); a per-micro-batch mean gives (mean, 1),
// which reduces to the mean of the micro-batches' means, as Megatron averages BERT's losses.
struct LossTerm {
  std::string name;  // as logged: "lm loss", "sop loss"
  double sum = 0;
  double count = 0;
  bool objective = true;  // part of the optimised objective; false: reported only
};

struct StepResult {
  std::vector<LossTerm> losses;  // in the model's order, which is the order they are logged in
  // With StepOptions::outputs: per-sample host tensors of shape (samples, ...), from the last
  // pipeline stage. Language models give "token_loss" (B, S) f32, each token's cross-entropy
  // against its label, and "token_argmax" (B, S) i64, the predicted id (the first largest logit
  // over the padded vocabulary, computed vocabulary-parallel); tokens whose loss mask is 0 may be
  // skipped (loss 0, argmax -1). Task heads give "logits" (B, K) f32 and "prediction" (B) i64,
  // the first largest logit's index.
  NamedTensors outputs;

  // Adds `other`'s sums and counts term by term (matched by name; new names are appended) and
  // stacks its outputs after these along dim 0 (micro-batches in the order they are added).
  void add(const StepResult& other);
  // The optimised objective of this result: sum over objective terms of sum / count (0 / 0: 0).
  double objective() const;
  // nullptr when there is no such term.
  const LossTerm* find(const std::string& name) const;
};

// A downstream task's head in place of a model's pretraining heads: Megatron's legacy
// Classification (pooler -> dropout -> Linear(h, classes)) and MultipleChoice (each of a sample's
// choices through the model, pooler -> dropout -> Linear(h, 1), the choices' scores as logits)
// over the same language model. Both read a class label per sample ("label", i32 scalar) and
// report Megatron's fine-tuning loss, the micro-batch's mean cross-entropy, as "lm loss".
struct TaskHead {
  enum class Kind { pretraining, classification, multiple_choice };
  Kind kind = Kind::pretraining;
  std::int64_t num_classes = 0;  // classification: classes; multiple_choice: choices per sample
};

// What selecting a task head changes in the parameters, as name prefixes: the head's new
// parameters (kept as initialised when a pretraining checkpoint loads) and the pretraining heads'
// that are gone (skipped in such a checkpoint).
struct TaskHeadParameters {
  std::vector<std::string> added;
  std::vector<std::string> dropped;
};

// The transformer dimensions memory planning needs (Megatron's argument names).
struct ModelDimensions {
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t ffn_hidden_size = 0;
  std::int64_t seq_length = 0;
  std::int64_t padded_vocab_size = 0;
  // Layers per pipeline stage when the model fixes them (a hybrid pattern's `|` boundaries);
  // empty: the [parallel] keys decide.
  std::vector<std::int64_t> stage_layer_counts = {};
};

class Model : public Plugin {
 public:
  ~Model() override;
  // The sample fields the model reads (name, dtype; a shape where it must be exact). The host
  // checks them against the dataset's before any work (check_sample_fields).
  virtual SampleSpec input_fields() const = 0;
  // Declares and allocates the parameters (meta device: declares only) and initialises them from
  // info.seed. Called once before anything else.
  virtual void build(const ModelBuildInfo& info) = 0;
  virtual ParameterSet& parameters() = 0;
  // Forward on `batch`, then (options.backward) backward of options.loss_scale * the objective
  // (StepResult::objective), accumulated into each Parameter::grad.
  virtual StepResult step(const Batch& batch, const StepOptions& options) = 0;
  // Model FLOPs of one forward+backward over `samples` sequences (Megatron's formula, for the
  // TFLOP/s figure).
  virtual double flops_per_iteration(std::int64_t samples) const = 0;
  virtual ModelDimensions dimensions() const = 0;
  // Megatron's (key, value) summary of the architecture for logs and `plan`.
  virtual std::string describe() const = 0;
  // The logged-only loss terms a training step of the whole model reports (MoE's
  // load_balancing_loss, z_loss), in logging order, known on every pipeline stage: the trainer
  // sums them over the stages, since each stage reports only its own layers'.
  virtual std::vector<std::string> auxiliary_loss_names() const { return {}; }
  // State the model keeps beside its parameters, saved in and loaded from checkpoints under
  // model/ like them but never trained (no gradient, no optimizer state; Megatron's persistent
  // buffers, e.g. MoE's router.expert_bias). Null or empty: none.
  virtual ParameterSet* buffers() { return nullptr; }
  // Once per training iteration, after its last micro-batch's backward and before the optimizer
  // step (Megatron's finalize_model_grads): per-iteration updates of the buffers, e.g. MoE's
  // aux-loss-free expert bias from the iteration's token counts. Collective over the tensor- and
  // data-parallel ranks of each pipeline stage.
  virtual void end_training_iteration() {}
  // Before input_fields() and build(): puts a task head in place of the pretraining heads. The
  // default accepts only Kind::pretraining and refuses the rest with a ConfigError.
  virtual TaskHeadParameters select_head(const TaskHead& head);

  // ---- pipeline parallelism (optional; the defaults refuse with the plugin's name) ----------
  // Activations pass between virtual stages as named tensors (T5's decoder stages receive the
  // encoder output beside their hidden states).
  struct ChunkOutput {
    NamedTensors activations;  // sent to the next virtual stage; empty on the last one
    StepResult loss;           // the last virtual stage's losses
  };
  // Forward of model chunk `chunk` (index into ModelBuildInfo::pipeline.chunks) on micro-batch
  // `micro_batch`; `input` is what the previous virtual stage sent (empty on the first). With
  // options.backward, what backward needs is kept under (chunk, micro_batch).
  virtual ChunkOutput forward_chunk(int chunk, std::int64_t micro_batch, const Batch& batch,
                                    const NamedTensors& input, const StepOptions& options);
  // Backward of that forward (then forgotten): `output_grad` holds the next virtual stage's
  // gradients of what this chunk sent (empty on the last). Accumulates parameter gradients,
  // reports them through options.grads_ready, and returns the gradients of `input` (empty on the
  // first virtual stage).
  virtual NamedTensors backward_chunk(int chunk, std::int64_t micro_batch,
                                      const NamedTensors& output_grad, const StepOptions& options);
  // Names, dtypes and shapes of what virtual stage `virtual_stage` (>= 1) receives from the one
  // before it, for a micro-batch of this many samples; the same list, in the same order, is what
  // its gradients are sent back as.
  virtual SampleSpec stage_inputs(int virtual_stage, std::int64_t micro_batch_size) const;
};

}  // namespace megatron
