// The language-model head and loss: logits = hidden W^T over the (padded) vocabulary, softmax
// cross-entropy against the labels, masked mean; backward without keeping the logits.
#pragma once

#include "megatron/nn/init.h"

namespace megatron::nn {

struct LmLossResult {
  double loss_sum = 0;     // sum of loss_mask * per-token loss
  double token_count = 0;  // sum of loss_mask
};

// hidden (rows, h); weight (V, h) (the output layer or the tied word embeddings); labels (rows)
// i32; loss_mask (rows) f32 on the host; `compute` bf16/f16 casts the GEMM inputs. With `dhidden`
// not null, backward of loss_scale * loss_sum / token_count: dhidden (rows, h) overwritten,
// weight->grad accumulated.
LmLossResult lm_loss(Backend& backend, const Tensor& hidden, Parameter& weight,
                     const Tensor& labels, const Tensor& loss_mask, float loss_scale,
                     Tensor* dhidden, DType compute = DType::f32);

}  // namespace megatron::nn
