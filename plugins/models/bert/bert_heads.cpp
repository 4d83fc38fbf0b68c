// BERT's post-process: the LM head with the masked-LM loss and the pooler with the sentence-order
// (binary) head, forward and backward, as Megatron-core's BertLMHead, Pooler and pretrain_bert's
// loss_func compute them.
#include <algorithm>

#include "bert_model.h"
#include "megatron/nn/lm_loss.h"

namespace megatron::bert {

struct BertModel::LmHeadState {
  Tensor normed, dense_out, activated, transformed;  // (rows, h) each
  nn::Norm::Saved norm_saved;
  Tensor dtransformed;  // the loss gradient at the LayerNorm's output, computed with the loss
};

struct BertModel::PooledState {
  // (R, h) token 0 of every sequence, the pooler's tanh output, the head's input (after
  // dropout); (R, K) the head's logits, which hold their gradient after backward.
  Tensor x0, pooled, head_in, logits;
  Tensor targets, row_max, sum_exp;  // per score row (R x K / classes of them)
  std::int64_t classes = 0;
  float loss_scale = 1;
  float dropout = 0;
  std::uint64_t dropout_offset = 0, dropout_seed = 0;
};

struct BertModel::PostState : nn::LayerStackModel::ProcessState {
  LmHeadState lm;
  PooledState pooled;
  std::int64_t normed_rows = 0;  // rows of this rank's normed input (a task head's dnormed)
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

double BertModel::pooled_forward(const nn::LayerContext& ctx, const Tensor& normed,
                                 std::int64_t rows, const nn::Linear& head, std::int64_t classes,
                                 const Tensor& targets, bool dropout, const StepOptions& options,
                                 PooledState& st) {
  Backend& be = ctx.backend;
  const std::int64_t h = normed.size(1), outputs = head.weight->global_shape[0];
  const std::int64_t scores = rows * outputs / classes;
  const DType dt = normed.dtype(), stat = dt == DType::f64 ? DType::f64 : DType::f32;
  // The Pooler reads token 0 of every sequence (rows 0..R-1 in (S, R) order); under sequence
  // parallelism it gathers the sequence first, as Megatron's Pooler does, so every rank computes
  // the same replicated heads.
  Tensor full = normed;
  if (tp().sp()) {
    full = be.empty({normed.size(0) * tp().size, h}, dt);
    nn::tp_gather_rows(tp(), normed, full);
  }
  st.x0 = be.empty({rows, h}, dt);
  be.copy(full.slice(0, 0, rows), st.x0);
  Tensor pre = be.empty({rows, h}, dt);
  pooler_.forward(be, st.x0, pre, ctx.compute);
  st.pooled = be.empty({rows, h}, dt);
  be.tanh_forward(pre, st.pooled);
  // The task models' dropout on the pooled output (hidden_dropout); the same mask on every
  // tensor-parallel rank, as the pooled output is replicated.
  st.dropout = dropout && ctx.training ? config_.transformer.hidden_dropout : 0.0f;
  st.head_in = st.pooled;
  if (st.dropout > 0) {
    st.dropout_seed = ctx.seed;
    st.dropout_offset = ctx.dropout_offset(post_process_dropout_site());
    st.head_in = be.empty({rows, h}, dt);
    be.dropout_forward(st.pooled, st.dropout, st.dropout_seed, st.dropout_offset, st.head_in);
  }
  st.logits = be.empty({rows, outputs}, dt);
  head.forward(be, st.head_in, st.logits, ctx.compute);

  // Cross-entropy of each score row against its target, averaged over the micro-batch
  // (torch's CrossEntropyLoss mean). A multiple-choice head's (R, 1) scores are read as
  // (R / choices, choices).
  st.classes = classes;
  const Tensor score_view = st.logits.view({scores, classes});
  st.targets = be.empty({scores}, DType::i32);
  be.copy(targets, st.targets);
  st.row_max = be.empty({scores}, stat);
  st.sum_exp = be.empty({scores}, stat);
  Tensor target_logit = be.empty({scores}, stat), loss = be.empty({scores}, stat);
  be.cross_entropy_max(score_view, st.row_max);
  be.cross_entropy_sums(score_view, st.targets, 0, st.row_max, st.sum_exp, target_logit);
  be.cross_entropy_loss(st.row_max, st.sum_exp, target_logit, loss);
  Tensor host = Tensor::empty({scores}, stat);
  be.copy(loss, host);
  double sum = 0;
  for (double v : host.to_vector<double>())
    sum += v;
  st.loss_scale = options.loss_scale;
  return sum / static_cast<double>(scores);
}

void BertModel::pooled_backward(const nn::LayerContext& ctx, const nn::Linear& head,
                                PooledState& st, Tensor& dnormed) {
  Backend& be = ctx.backend;
  const std::int64_t rows = st.x0.size(0), h = st.x0.size(1);
  const std::int64_t scores = st.targets.numel();
  const DType dt = st.x0.dtype();
  Tensor dloss = be.empty({scores}, st.row_max.dtype());
  be.fill(dloss, static_cast<double>(st.loss_scale) / static_cast<double>(scores));
  Tensor score_view = st.logits.view({scores, st.classes});
  be.cross_entropy_backward(score_view, st.targets, 0, st.row_max, st.sum_exp, dloss, score_view);
  Tensor dhead_in = be.empty({rows, h}, dt);
  head.backward(be, st.head_in, st.logits, &dhead_in, ctx.compute);
  Tensor dpooled = dhead_in;
  if (st.dropout > 0) {
    dpooled = be.empty({rows, h}, dt);
    be.dropout_backward(dhead_in, st.dropout, st.dropout_seed, st.dropout_offset, dpooled);
  }
  Tensor dpre = be.empty({rows, h}, dt);
  be.tanh_backward(dpooled, st.pooled, dpre);
  Tensor dx0 = be.empty({rows, h}, dt);
  pooler_.backward(be, st.x0, dpre, &dx0, ctx.compute);
  // Token 0's rows belong to the first sequence shard: the gather's backward hands each rank its
  // own rows of the gradient.
  if (tp().sp() && tp().rank != 0) return;
  Tensor rows0 = dnormed.slice(0, 0, rows);
  be.add(rows0, dx0, rows0);
}

StepResult BertModel::post_forward(const nn::LayerContext& ctx, const Batch& batch,
                                   const Tensor& normed, const StepOptions& options,
                                   std::unique_ptr<ProcessState>& state) {
  auto st = std::make_unique<PostState>();
  StepResult result;
  if (head_.kind != TaskHead::Kind::pretraining) {
    // finetune_utils' cross_entropy_loss_func: the micro-batch's mean, logged as "lm loss".
    const std::int64_t samples = batch.size(), classes = head_.num_classes;
    const double loss = pooled_forward(ctx, normed, samples * sequences_per_sample(), task_head_,
                                       classes, batch["label"], true, options, st->pooled);
    result.losses.push_back({"lm loss", loss, 1});
    if (options.outputs) {
      // The scores as a (samples, classes) host tensor, and torch.argmax's first largest index.
      const Tensor device_scores = st->pooled.logits.view({samples, classes});
      Tensor host = Tensor::empty({samples, classes}, device_scores.dtype());
      ctx.backend.copy(device_scores, host);
      const Tensor logits = host.to(DType::f32);
      const std::vector<float> values = logits.to_vector<float>();
      std::vector<std::int64_t> prediction(static_cast<std::size_t>(samples));
      for (std::int64_t i = 0; i < samples; ++i) {
        const auto row = values.begin() + i * classes;
        prediction[static_cast<std::size_t>(i)] = std::max_element(row, row + classes) - row;
      }
      result.outputs.emplace_back("logits", logits);
      result.outputs.emplace_back("prediction", Tensor::from(prediction, {samples}));
    }
    st->normed_rows = normed.size(0);
    state = std::move(st);
    return result;
  }
  // pretrain_bert's loss_func: per-micro-batch means, averaged over micro-batches and
  // data-parallel ranks when reported (count 1 each); the objective is their sum.
  result.losses.push_back({"lm loss", lm_head_forward(ctx, batch, normed, options, st->lm), 1});
  if (binary_head_) {
    result.losses.push_back({"sop loss",
                             pooled_forward(ctx, normed, batch.size(), binary_head_layer_, 2,
                                            batch["is_random"], false, options, st->pooled),
                             1});
  }
  state = std::move(st);
  return result;
}

Tensor BertModel::post_backward(const nn::LayerContext& ctx, ProcessState* state) {
  auto* st = static_cast<PostState*>(state);
  if (head_.kind != TaskHead::Kind::pretraining) {
    // Only token 0's rows of normed have a gradient.
    Tensor dnormed =
        ctx.backend.empty({st->normed_rows, st->pooled.x0.size(1)}, st->pooled.x0.dtype());
    ctx.backend.fill(dnormed, 0.0);
    pooled_backward(ctx, task_head_, st->pooled, dnormed);
    return dnormed;
  }
  Tensor dnormed = lm_head_backward(ctx, st->lm);
  if (binary_head_) pooled_backward(ctx, binary_head_layer_, st->pooled, dnormed);
  return dnormed;
}

}  // namespace megatron::bert
