// The language-model head and loss: logits = hidden W^T over the (padded) vocabulary, softmax
// cross-entropy against the labels, masked mean; backward without keeping the logits. Under
// tensor parallelism the vocabulary is split (Megatron's vocab-parallel cross-entropy): no rank
// ever holds full-vocabulary logits.
#pragma once

#include "megatron/nn/init.h"

namespace megatron::nn {

struct LmLossResult {
  double loss_sum = 0;     // sum of loss_mask * per-token loss
  double token_count = 0;  // sum of loss_mask
};

// Per-row predictions for evaluation (zero-shot tasks), on the host, rows in `labels`' order and
// the same on every tensor-parallel rank. Rows with mask 0 may be skipped when few rows count
// (see below): their loss is 0 and their argmax -1.
struct LmTokenOutputs {
  Tensor loss;    // (rows) f32: each row's cross-entropy against its label
  Tensor argmax;  // (rows) i64: the first index of the row's largest logit over the padded
                  // vocabulary (vocabulary-parallel: each shard's candidate, then a MIN reduce)
};

// hidden (rows, h); weight (V, h) (the output layer or the tied word embeddings; under tensor
// parallelism this rank's vocabulary slice, rows [rank V/tp, (rank+1) V/tp)); labels (rows) i32;
// loss_mask (rows) f32 on the host; `compute` bf16/f16 casts the GEMM inputs. With `dhidden` not
// null, backward of loss_scale * loss_sum / token_count: dhidden (shaped as hidden) overwritten,
// weight->grad accumulated.
//
// With `tp` split, the per-row max, sum of exponentials and target logit are all-reduced over the
// group and dhidden's partial sums too (the output layer is column-parallel); under sequence
// parallelism hidden and dhidden are (rows / tp, h) sequence shards, all-gathered forward and
// reduce-scattered backward. Labels and mask cover all rows on every rank; the result is the same
// on every rank.
//
// `bias` (V) (this rank's vocabulary slice, like the weight), when given, is added to the logits
// (BERT's and T5's output_layer.bias) and its gradient accumulated. Labels outside the vocabulary
// (BERT's -1 at unmasked positions) must have mask 0.
//
// `outputs`, when given, receives every row's loss and prediction (LmTokenOutputs).
//
// When at most half of the rows have a non-zero mask (BERT's masked LM), only those rows go
// through the output layer: the loss and every gradient are those of the full computation (the
// other rows contribute exactly zero), at a fraction of its cost; dhidden is zero on the others.
LmLossResult lm_loss(Backend& backend, const Tensor& hidden, Parameter& weight,
                     const Tensor& labels, const Tensor& loss_mask, float loss_scale,
                     Tensor* dhidden, DType compute = DType::f32, const TensorParallelism& tp = {},
                     Parameter* bias = nullptr, LmTokenOutputs* outputs = nullptr);

}  // namespace megatron::nn
