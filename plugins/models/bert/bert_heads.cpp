// BERT's post-process: the LM head with the masked-LM loss and the pooler with the sentence-order
// (binary) head, forward and backward, as Megatron-core's BertLMHead, Pooler and pretrain_bert's
// loss_func compute them.
#include "bert_model.h"
#include "megatron/nn/lm_loss.h"

namespace megatron::bert {

struct BertModel::LmHeadState {
  Tensor normed, dense_out, activated, transformed;  // (rows, h) each
  nn::Norm::Saved norm_saved;
  Tensor dtransformed;  // the loss gradient at the LayerNorm's output, computed with the loss
};

struct BertModel::SopState {
  Tensor x0, pooled, logits;  // (B, h), (B, h), (B, 2): the last holds the gradient after backward
  Tensor targets, row_max, sum_exp;
  float loss_scale = 1;
};

struct BertModel::PostState : nn::LayerStackModel::ProcessState {
  LmHeadState lm;
  SopState sop;
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

  const std::int64_t rows_full = batch["labels"].numel();
  const Tensor labels = nn::sequence_major(be, batch["labels"]).view({rows_full});
  const Tensor mask = batch["loss_mask"].transpose(0, 1).contiguous().view({rows_full});
  if (options.backward) st.dtransformed = be.empty({rows, h}, dt);
  const nn::LmLossResult r = nn::lm_loss(
      be, st.transformed, output_weight(), labels, mask, options.loss_scale,
      options.backward ? &st.dtransformed : nullptr, info().compute_dtype, tp(), output_bias_);
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

double BertModel::sop_forward(const nn::LayerContext& ctx, const Batch& batch, const Tensor& normed,
                              const StepOptions& options, SopState& st) {
  Backend& be = ctx.backend;
  const std::int64_t b = batch.size(), h = normed.size(1);
  const DType dt = normed.dtype(), stat = dt == DType::f64 ? DType::f64 : DType::f32;
  // The Pooler reads token 0 of every sample (rows 0..B-1 in (S, B) order); under sequence
  // parallelism it gathers the sequence first, as Megatron's Pooler does, so every rank computes
  // the same replicated heads.
  Tensor full = normed;
  if (tp().sp()) {
    full = be.empty({normed.size(0) * tp().size, h}, dt);
    nn::tp_gather_rows(tp(), normed, full);
  }
  st.x0 = be.empty({b, h}, dt);
  be.copy(full.slice(0, 0, b), st.x0);
  Tensor pre = be.empty({b, h}, dt);
  pooler_.forward(be, st.x0, pre, ctx.compute);
  st.pooled = be.empty({b, h}, dt);
  be.tanh_forward(pre, st.pooled);
  st.logits = be.empty({b, 2}, dt);
  binary_head_layer_.forward(be, st.pooled, st.logits, ctx.compute);

  // Cross-entropy against is_random, averaged over the micro-batch (F.cross_entropy's mean).
  st.targets = be.empty({b}, DType::i32);
  be.copy(batch["is_random"], st.targets);
  st.row_max = be.empty({b}, stat);
  st.sum_exp = be.empty({b}, stat);
  Tensor target_logit = be.empty({b}, stat), loss = be.empty({b}, stat);
  be.cross_entropy_max(st.logits, st.row_max);
  be.cross_entropy_sums(st.logits, st.targets, 0, st.row_max, st.sum_exp, target_logit);
  be.cross_entropy_loss(st.row_max, st.sum_exp, target_logit, loss);
  Tensor host = Tensor::empty({b}, stat);
  be.copy(loss, host);
  double sum = 0;
  for (double v : host.to_vector<double>())
    sum += v;
  st.loss_scale = options.loss_scale;
  return sum / static_cast<double>(b);
}

void BertModel::sop_backward(const nn::LayerContext& ctx, SopState& st, Tensor& dnormed) {
  Backend& be = ctx.backend;
  const std::int64_t b = st.x0.size(0), h = st.x0.size(1);
  const DType dt = st.x0.dtype();
  Tensor dloss = be.empty({b}, st.row_max.dtype());
  be.fill(dloss, static_cast<double>(st.loss_scale) / static_cast<double>(b));
  be.cross_entropy_backward(st.logits, st.targets, 0, st.row_max, st.sum_exp, dloss, st.logits);
  Tensor dpooled = be.empty({b, h}, dt);
  binary_head_layer_.backward(be, st.pooled, st.logits, &dpooled, ctx.compute);
  Tensor dpre = be.empty({b, h}, dt);
  be.tanh_backward(dpooled, st.pooled, dpre);
  Tensor dx0 = be.empty({b, h}, dt);
  pooler_.backward(be, st.x0, dpre, &dx0, ctx.compute);
  // Token 0's rows belong to the first sequence shard: the gather's backward hands each rank its
  // own rows of the gradient.
  if (tp().sp() && tp().rank != 0) return;
  Tensor rows0 = dnormed.slice(0, 0, b);
  be.add(rows0, dx0, rows0);
}

StepResult BertModel::post_forward(const nn::LayerContext& ctx, const Batch& batch,
                                   const Tensor& normed, const StepOptions& options,
                                   std::unique_ptr<ProcessState>& state) {
  auto st = std::make_unique<PostState>();
  // pretrain_bert's loss_func: per-micro-batch means, averaged over micro-batches and
  // data-parallel ranks when reported (count 1 each); the objective is their sum.
  StepResult result;
  result.losses.push_back({"lm loss", lm_head_forward(ctx, batch, normed, options, st->lm), 1});
  if (binary_head_) {
    result.losses.push_back({"sop loss", sop_forward(ctx, batch, normed, options, st->sop), 1});
  }
  state = std::move(st);
  return result;
}

Tensor BertModel::post_backward(const nn::LayerContext& ctx, ProcessState* state) {
  auto* st = static_cast<PostState*>(state);
  Tensor dnormed = lm_head_backward(ctx, st->lm);
  if (binary_head_) sop_backward(ctx, st->sop, dnormed);
  return dnormed;
}

}  // namespace megatron::bert
