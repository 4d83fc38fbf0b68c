// BERT's post-process: the LM head with the masked-LM loss and the pooler with the sentence-order
// (binary) head, forward and backward, as Megatron-core's BertLMHead, Pooler and pretrain_bert's
// loss_func compute them; or a fine-tuning task head (the core's TaskHeadLayer).
#include "bert_model.h"
#include "megatron/nn/lm_head.h"

namespace megatron::bert {

struct BertModel::LmHeadState {
  Tensor normed, dense_out, activated, transformed;  // (rows, h) each
  nn::Norm::Saved norm_saved;
  Tensor dtransformed;  // the loss gradient at the LayerNorm's output, computed with the loss
};

struct BertModel::PostState : nn::LayerStackModel::ProcessState {
  LmHeadState lm;
  nn::PooledHeadRun pooled;  // the sentence-order head's, or the task head's
};

double BertModel::lm_head_forward(const nn::LayerContext& ctx, const Batch& batch,
                                  const Tensor& normed, const StepOptions& options,
                                  LmHeadState& st) {
  Backend& be = ctx.backend;
  const std::int64_t rows = normed.size(0), h = normed.size(1);
  const DType dt = normed.dtype();
  st.normed = normed;
  st.dense_out = be.empty({rows, h}, dt);
  lm_dense_.forward(be, normed, st.dense_out, ctx.compute);
  // BertLMHead applies torch.nn.functional.gelu: the exact (erf) form.
  st.activated = be.empty({rows, h}, dt);
  be.gelu_forward(st.dense_out, st.activated, GeluApproximation::none);
  st.transformed = be.empty({rows, h}, dt);
  lm_norm_.forward(be, st.activated, st.transformed, st.norm_saved);

  if (options.backward) st.dtransformed = be.empty({rows, h}, dt);
  const nn::LmLossResult r = nn::batch_lm_loss(ctx, batch, st.transformed, output_weight(),
                                               output_bias_, options, tp(), &st.dtransformed);
  // pretrain_bert's lm loss: the masked mean of the micro-batch.
  return r.token_count > 0 ? r.loss_sum / r.token_count : 0.0;
}

Tensor BertModel::lm_head_backward(const nn::LayerContext& ctx, LmHeadState& st) {
  Backend& be = ctx.backend;
  const std::int64_t rows = st.normed.size(0), h = st.normed.size(1);
  const DType dt = st.normed.dtype();
  Tensor dactivated = be.empty({rows, h}, dt);
  lm_norm_.backward(be, st.dtransformed, st.activated, st.norm_saved, dactivated);
  Tensor ddense = be.empty({rows, h}, dt);
  be.gelu_backward(dactivated, st.dense_out, ddense, GeluApproximation::none);
  Tensor dnormed = be.empty({rows, h}, dt);
  lm_dense_.backward(be, st.normed, ddense, &dnormed, ctx.compute);
  return dnormed;
}

StepResult BertModel::post_forward(const nn::LayerContext& ctx, const Batch& batch,
                                   const Tensor& normed, const StepOptions& options,
                                   std::unique_ptr<ProcessState>& state) {
  auto st = std::make_unique<PostState>();
  StepResult result;
  if (head_.kind != TaskHead::Kind::pretraining) {
    result = task_head_.forward(ctx, tp(), batch, normed, post_process_dropout_site(), options,
                                st->pooled);
    state = std::move(st);
    return result;
  }
  // pretrain_bert's loss_func: per-micro-batch means, averaged over micro-batches and
  // data-parallel ranks when reported (count 1 each); the objective is their sum.
  result.losses.push_back({"lm loss", lm_head_forward(ctx, batch, normed, options, st->lm), 1});
  if (binary_head_) {
    result.losses.push_back(
        {"sop loss",
         st->pooled.forward(ctx, tp(), pooler_, normed, batch.size(), binary_head_layer_, 2,
                            batch["is_random"], 0.0f, 0, options),
         1});
  }
  state = std::move(st);
  return result;
}

Tensor BertModel::post_backward(const nn::LayerContext& ctx, ProcessState* state) {
  auto* st = static_cast<PostState*>(state);
  if (head_.kind != TaskHead::Kind::pretraining) {
    return task_head_.backward(ctx, tp(), st->pooled);
  }
  Tensor dnormed = lm_head_backward(ctx, st->lm);
  if (binary_head_) st->pooled.backward(ctx, tp(), pooler_, binary_head_layer_, dnormed);
  return dnormed;
}

}  // namespace megatron::bert
