// The language-model head of every model that has one (GPT, Mamba, BERT's masked LM, T5's
// decoder): a batch's `labels` and `loss_mask` against the final hidden rows, through the output
// layer, as Megatron's loss_func computes it.
#pragma once

#include "megatron/model.h"
#include "megatron/nn/layer_context.h"
#include "megatron/nn/lm_loss.h"

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

}  // namespace megatron::nn
