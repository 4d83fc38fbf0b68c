// The language-model head of every model that has one (GPT, Mamba, BERT's masked LM, T5's
// decoder): a batch's `labels` and `loss_mask` against the final hidden rows, through the output
// layer, as Megatron's loss_func computes it.
#pragma once

#include <string>

#include "megatron/model.h"
#include "megatron/nn/layer_context.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/lm_loss.h"
#include "megatron/nn/norm.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

// hidden: (rows, h), rows in Megatron's sequence-major order (s * B + b), or this rank's sequence
// shard under sequence parallelism; the batch's `labels` (B, S) i32 and `loss_mask` (B, S) f32.
// With options.backward, *dhidden (shaped as hidden) receives the gradient of options.loss_scale
// * loss_sum / token_count; weight's (and bias's) gradients are accumulated. With options.outputs
// and `outputs` given, appends Megatron's per-token outputs as (B, S) host tensors: "token_loss"
// and "token_argmax" (StepResult::outputs).
LmLossResult batch_lm_loss(const LayerContext& ctx, const Batch& batch, const Tensor& hidden,
                           Parameter& weight, Parameter* bias, const StepOptions& options,
                           const TensorParallelism& tp, Tensor* dhidden,
                           NamedTensors* outputs = nullptr);

// Megatron's BertLMHead, a language-model head with a transform before the output layer:
// `<prefix>.dense` (h -> h) -> exact (erf) gelu -> `<prefix>.layer_norm`, then batch_lm_loss
// through the caller's output weight and bias.
class TransformLmHead {
 public:
  // The dense layer and LayerNorm are replicated and run on sequence shards under sequence
  // parallelism, so their gradients are partial sums (marked, as Megatron marks them).
  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config);
  // What backward needs from one micro-batch.
  struct Run {
    Tensor normed, dense_out, activated, transformed;  // (rows, h) each
    Norm::Saved norm_saved;
    Tensor dtransformed;  // the loss gradient at the LayerNorm's output, computed with the loss
  };
  LmLossResult forward(const LayerContext& ctx, const Batch& batch, const Tensor& normed,
                       Parameter& weight, Parameter* bias, const StepOptions& options,
                       const TensorParallelism& tp, Run& run) const;
  // The gradient w.r.t. normed; accumulates the transform's parameter gradients.
  Tensor backward(const LayerContext& ctx, Run& run) const;

 private:
  Linear dense_;
  Norm norm_;
};

}  // namespace megatron::nn
