// The batch-level language-model loss: labels and mask laid out as the hidden rows, per-token
// outputs back in the batch's (B, S) layout.
#include "megatron/nn/lm_head.h"

#include "megatron/nn/layer_stack_model.h"

namespace megatron::nn {

namespace {

// Under context parallelism a micro-batch's tokens are spread over the group. Each rank's
// gradient is of its tokens' share of the whole micro-batch's mean loss, times the group's size,
// because the gradients are then averaged over data x context ranks (Megatron's loss * cp / the
// group's token count). lm_loss divides by this rank's count, so the scale it is given carries
// count / the group's count.
float context_parallel_loss_scale(const LayerContext& ctx, const Tensor& mask, float loss_scale) {
  double local = 0;
  for (const float m : mask.to_vector<float>())
    local += m;
  const double group = context_parallel_sum(ctx.backend, ctx.context, local);
  if (local <= 0 || group <= 0) return loss_scale;  // no token of this rank counts
  return static_cast<float>(static_cast<double>(loss_scale) * ctx.context.size * local / group);
}

}  // namespace

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
  const float loss_scale = ctx.context.split() && options.backward
                               ? context_parallel_loss_scale(ctx, mask, options.loss_scale)
                               : options.loss_scale;
  const LmLossResult loss =
      lm_loss(be, hidden, weight, labels, mask, loss_scale, options.backward ? dhidden : nullptr,
              ctx.compute, tp, bias, want_outputs ? &tokens : nullptr);
  if (want_outputs) {
    // Rows are sequence-major (s * B + b); outputs are per sample, (B, S).
    outputs->emplace_back("token_loss", tokens.loss.view({s, b}).transpose(0, 1).contiguous());
    outputs->emplace_back("token_argmax", tokens.argmax.view({s, b}).transpose(0, 1).contiguous());
  }
  return loss;
}

void TransformLmHead::declare(ParamFactory& factory, const std::string& prefix,
                              const TransformerConfig& config) {
  const std::int64_t h = config.hidden_size;
  dense_ = Linear::declare(factory, prefix + ".dense", h, h, true, config.init_method_std);
  dense_.weight->sequence_parallel = dense_.bias->sequence_parallel = factory.tp.sp();
  norm_ =
      Norm::declare(factory, prefix + ".layer_norm", h, NormKind::layernorm, config.norm_epsilon);
}

LmLossResult TransformLmHead::forward(const LayerContext& ctx, const Batch& batch,
                                      const Tensor& normed, Parameter& weight, Parameter* bias,
                                      const StepOptions& options, const TensorParallelism& tp,
                                      Run& run) const {
  Backend& be = ctx.backend;
  const Shape shape = normed.shape();
  const DType dt = normed.dtype();
  run.normed = normed;
  run.dense_out = be.empty(shape, dt);
  dense_.forward(be, normed, run.dense_out, ctx.compute);
  // BertLMHead applies torch.nn.functional.gelu: the exact (erf) form.
  run.activated = be.empty(shape, dt);
  be.gelu_forward(run.dense_out, run.activated, GeluApproximation::none);
  run.transformed = be.empty(shape, dt);
  norm_.forward(be, run.activated, run.transformed, run.norm_saved);
  if (options.backward) run.dtransformed = be.empty(shape, dt);
  return batch_lm_loss(ctx, batch, run.transformed, weight, bias, options, tp, &run.dtransformed);
}

Tensor TransformLmHead::backward(const LayerContext& ctx, Run& run) const {
  Backend& be = ctx.backend;
  const Shape shape = run.normed.shape();
  const DType dt = run.normed.dtype();
  Tensor dactivated = be.empty(shape, dt);
  norm_.backward(be, run.dtransformed, run.activated, run.norm_saved, dactivated);
  Tensor ddense = be.empty(shape, dt);
  be.gelu_backward(dactivated, run.dense_out, ddense, GeluApproximation::none);
  Tensor dnormed = be.empty(shape, dt);
  dense_.backward(be, run.normed, ddense, &dnormed, ctx.compute);
  return dnormed;
}

}  // namespace megatron::nn
