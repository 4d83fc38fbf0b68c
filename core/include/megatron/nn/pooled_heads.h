// Heads on the pooled first token, usable by any encoder model: Megatron's Pooler (tanh of a dense
// layer on token 0 of every sequence) feeding a replicated head and a mean cross-entropy. BERT's
// sentence-order head is one; the legacy task models' Classification and MultipleChoice heads
// (TaskHeads) are the other.
#pragma once

#include <cstdint>

#include "megatron/model.h"
#include "megatron/nn/layer_context.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

// Forward and backward of pooler -> tanh -> [dropout] -> head -> mean cross-entropy.
struct PooledHeadRun {
  // (R, h) token 0 of every sequence, the pooler's tanh output, the head's input (after
  // dropout); (R, K) the head's logits, which hold their gradient after backward.
  Tensor x0, pooled, head_in, logits;
  Tensor targets, row_max, sum_exp;  // per score row (R x K / classes of them)
  std::int64_t classes = 0;
  float loss_scale = 1;
  float dropout = 0;
  std::uint64_t dropout_offset = 0, dropout_seed = 0;
  std::int64_t normed_rows = 0;  // rows of this rank's normed input

  // Token 0 of each of `rows` sequences of normed ((S, rows) order, or this rank's sequence shard
  // under sequence parallelism, gathered first as Megatron's Pooler does) -> pooler -> tanh ->
  // dropout of probability `dropout` (training only; site `dropout_site`, the same mask on every
  // tensor-parallel rank) -> `head` -> logits read as (rows x head outputs / classes, classes)
  // scores -> mean cross-entropy against `targets` (one per score row). Returns the mean.
  double forward(const LayerContext& ctx, const TensorParallelism& tp, const Linear& pooler,
                 const Tensor& normed, std::int64_t rows, const Linear& head, std::int64_t classes,
                 const Tensor& targets, float dropout, std::uint64_t dropout_site,
                 const StepOptions& options);
  // Adds the loss's gradient (of options.loss_scale * the mean) to dnormed's token-0 rows;
  // accumulates the pooler's and head's parameter gradients.
  void backward(const LayerContext& ctx, const TensorParallelism& tp, const Linear& pooler,
                const Linear& head, Tensor& dnormed);
};

// Megatron's legacy Classification and MultipleChoice heads: `pooler.dense`, then dropout
// (hidden_dropout) and `classification_head` (classes outputs) or `multichoice_head` (one score
// per choice), with finetune_utils' mean cross-entropy against the batch's `label`.
class TaskHeadLayer {
 public:
  // The head's parameters, added to a pretrained checkpoint's, and the pooler's when
  // `pooler_in_checkpoint` is false (a model pretrained without one). Refuses (ConfigError) a
  // head of fewer than 2 classes or choices.
  static TaskHeadParameters parameters(const TaskHead& head, bool pooler_in_checkpoint);
  // Sequences per sample: the choices of a multiple-choice head, else 1.
  static std::int64_t sequences_per_sample(const TaskHead& head);
  // A per-sequence field of the batch as (sequences, S): a multiple-choice batch's (B, C, S)
  // flattened; otherwise the field itself. `model` names the model in errors.
  static Tensor sequences(const TaskHead& head, const Batch& batch, const char* field,
                          const std::string& model);

  void declare(ParamFactory& factory, const TransformerConfig& config, const TaskHead& head);
  // normed: the final hidden states of samples x sequences_per_sample sequences. Returns "lm
  // loss" (the micro-batch mean, count 1) and with options.outputs "logits" (samples, classes)
  // f32 and "prediction" (samples) i64.
  // What backward needs is kept in `run` (one per micro-batch).
  StepResult forward(const LayerContext& ctx, const TensorParallelism& tp, const Batch& batch,
                     const Tensor& normed, std::uint64_t dropout_site, const StepOptions& options,
                     PooledHeadRun& run) const;
  // The gradient w.r.t. normed (zero but on token 0's rows).
  Tensor backward(const LayerContext& ctx, const TensorParallelism& tp, PooledHeadRun& run) const;

 private:
  TaskHead head_;
  float hidden_dropout_ = 0;
  Linear pooler_, head_layer_;
};

}  // namespace megatron::nn
