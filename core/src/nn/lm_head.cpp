// The batch-level language-model loss: labels and mask laid out as the hidden rows, per-token
// outputs back in the batch's (B, S) layout.
#include "megatron/nn/lm_head.h"

#include "megatron/nn/layer_stack_model.h"

namespace megatron::nn {

LmLossResult batch_lm_loss(const LayerContext& ctx, const Batch& batch, const Tensor& hidden,
                           Parameter& weight, Parameter* bias, const StepOptions& options,
                           const TensorParallelism& tp, Tensor* dhidden, NamedTensors* outputs) {
  Backend& be = ctx.backend;
  const Tensor& labels_bm = batch["labels"];
  const std::int64_t b = labels_bm.size(0), s = labels_bm.size(1), rows = labels_bm.numel();
  const Tensor labels = sequence_major(be, labels_bm).view({rows});
  const Tensor mask = batch["loss_mask"].transpose(0, 1).contiguous().view({rows});
  const bool want_outputs = options.outputs && outputs != nullptr;
  LmTokenOutputs tokens;
  const LmLossResult loss = lm_loss(be, hidden, weight, labels, mask, options.loss_scale,
                                    options.backward ? dhidden : nullptr, ctx.compute, tp, bias,
                                    want_outputs ? &tokens : nullptr);
  if (want_outputs) {
    // Rows are sequence-major (s * B + b); outputs are per sample, (B, S).
    outputs->emplace_back("token_loss", tokens.loss.view({s, b}).transpose(0, 1).contiguous());
    outputs->emplace_back("token_argmax", tokens.argmax.view({s, b}).transpose(0, 1).contiguous());
  }
  return loss;
}

}  // namespace megatron::nn
