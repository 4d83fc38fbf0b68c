// The pooled first-token heads: Megatron's Pooler, the replicated head, the mean cross-entropy and
// the legacy Classification / MultipleChoice task heads, forward and backward.
#include "megatron/nn/pooled_heads.h"

#include <algorithm>
#include <string>
#include <vector>

#include "megatron/error.h"
#include "megatron/nn/tensor_parallel.h"

namespace megatron::nn {

double PooledHeadRun::forward(const LayerContext& ctx, const TensorParallelism& tp,
                              const Linear& pooler, const Tensor& normed, std::int64_t rows,
                              const Linear& head, std::int64_t num_classes,
                              const Tensor& targets_in, float dropout_p, std::uint64_t dropout_site,
                              const StepOptions& options) {
  Backend& be = ctx.backend;
  const std::int64_t h = normed.size(1), outputs = head.weight->global_shape[0];
  const std::int64_t scores = rows * outputs / num_classes;
  const DType dt = normed.dtype(), stat = dt == DType::f64 ? DType::f64 : DType::f32;
  normed_rows = normed.size(0);
  // The Pooler reads token 0 of every sequence (rows 0..R-1 in (S, R) order); under sequence
  // parallelism it gathers the sequence first, as Megatron's Pooler does, so every rank computes
  // the same replicated heads.
  Tensor full = normed;
  if (tp.sp()) {
    full = be.empty({normed.size(0) * tp.size, h}, dt);
    tp_gather_rows(tp, normed, full);
  }
  x0 = be.empty({rows, h}, dt);
  be.copy(full.slice(0, 0, rows), x0);
  Tensor pre = be.empty({rows, h}, dt);
  pooler.forward(be, x0, pre, ctx.compute);
  pooled = be.empty({rows, h}, dt);
  be.tanh_forward(pre, pooled);
  // The same mask on every tensor-parallel rank, as the pooled output is replicated.
  dropout = ctx.training ? dropout_p : 0.0f;
  head_in = pooled;
  if (dropout > 0) {
    dropout_seed = ctx.seed;
    dropout_offset = ctx.dropout_offset(dropout_site);
    head_in = be.empty({rows, h}, dt);
    be.dropout_forward(pooled, dropout, dropout_seed, dropout_offset, head_in);
  }
  logits = be.empty({rows, outputs}, dt);
  head.forward(be, head_in, logits, ctx.compute);

  // Cross-entropy of each score row against its target, averaged over the micro-batch
  // (torch's CrossEntropyLoss mean). A multiple-choice head's (R, 1) scores are read as
  // (R / choices, choices).
  classes = num_classes;
  const Tensor score_view = logits.view({scores, classes});
  targets = be.empty({scores}, DType::i32);
  be.copy(targets_in, targets);
  row_max = be.empty({scores}, stat);
  sum_exp = be.empty({scores}, stat);
  Tensor target_logit = be.empty({scores}, stat), loss = be.empty({scores}, stat);
  be.cross_entropy_max(score_view, row_max);
  be.cross_entropy_sums(score_view, targets, 0, row_max, sum_exp, target_logit);
  be.cross_entropy_loss(row_max, sum_exp, target_logit, loss);
  Tensor host = Tensor::empty({scores}, stat);
  be.copy(loss, host);
  double sum = 0;
  for (double v : host.to_vector<double>())
    sum += v;
  loss_scale = options.loss_scale;
  return sum / static_cast<double>(scores);
}

void PooledHeadRun::backward(const LayerContext& ctx, const TensorParallelism& tp,
                             const Linear& pooler, const Linear& head, Tensor& dnormed) {
  Backend& be = ctx.backend;
  const std::int64_t rows = x0.size(0), h = x0.size(1);
  const std::int64_t scores = targets.numel();
  const DType dt = x0.dtype();
  Tensor dloss = be.empty({scores}, row_max.dtype());
  be.fill(dloss, static_cast<double>(loss_scale) / static_cast<double>(scores));
  Tensor score_view = logits.view({scores, classes});
  be.cross_entropy_backward(score_view, targets, 0, row_max, sum_exp, dloss, score_view);
  Tensor dhead_in = be.empty({rows, h}, dt);
  head.backward(be, head_in, logits, &dhead_in, ctx.compute);
  Tensor dpooled = dhead_in;
  if (dropout > 0) {
    dpooled = be.empty({rows, h}, dt);
    be.dropout_backward(dhead_in, dropout, dropout_seed, dropout_offset, dpooled);
  }
  Tensor dpre = be.empty({rows, h}, dt);
  be.tanh_backward(dpooled, pooled, dpre);
  Tensor dx0 = be.empty({rows, h}, dt);
  pooler.backward(be, x0, dpre, &dx0, ctx.compute);
  // Token 0's rows belong to the first sequence shard: the gather's backward hands each rank its
  // own rows of the gradient.
  if (tp.sp() && tp.rank != 0) return;
  Tensor rows0 = dnormed.slice(0, 0, rows);
  be.add(rows0, dx0, rows0);
}

TaskHeadParameters TaskHeadLayer::parameters(const TaskHead& head, bool pooler_in_checkpoint) {
  TaskHeadParameters names;
  if (head.kind == TaskHead::Kind::pretraining) return names;
  if (head.num_classes < 1 + (head.kind == TaskHead::Kind::classification)) {
    throw ConfigError("a task head needs at least 2 classes or choices, got " +
                      std::to_string(head.num_classes));
  }
  names.added = {head.kind == TaskHead::Kind::classification ? "classification_head."
                                                             : "multichoice_head."};
  if (!pooler_in_checkpoint) names.added.push_back("pooler.");
  return names;
}

std::int64_t TaskHeadLayer::sequences_per_sample(const TaskHead& head) {
  return head.kind == TaskHead::Kind::multiple_choice ? head.num_classes : 1;
}

Tensor TaskHeadLayer::sequences(const TaskHead& head, const Batch& batch, const char* field,
                                const std::string& model) {
  const Tensor& t = batch[field];
  const std::int64_t c = sequences_per_sample(head);
  if (c == 1) return t;
  if (t.dim() != 3 || t.size(1) != c) {
    throw Error(model + " multiple-choice head: field '" + std::string(field) + "' is " +
                t.describe() + "; expected (samples, " + std::to_string(c) + ", sequence)");
  }
  return t.view({t.size(0) * c, t.size(2)});
}

void TaskHeadLayer::declare(ParamFactory& factory, const TransformerConfig& config,
                            const TaskHead& head) {
  if (head.kind == TaskHead::Kind::pretraining) {
    throw Error("TaskHeadLayer: no task head selected (pretraining)");
  }
  // Megatron's Classification / MultipleChoice: the pooler, dropout and a plain (replicated)
  // Linear of get_linear_layer's initialisation (normal weight, zero bias).
  head_ = head;
  hidden_dropout_ = config.hidden_dropout;
  const std::int64_t h = config.hidden_size;
  pooler_ = Linear::declare(factory, "pooler.dense", h, h, true, config.init_method_std);
  const bool classes = head.kind == TaskHead::Kind::classification;
  head_layer_ = Linear::declare(factory, classes ? "classification_head" : "multichoice_head", h,
                                classes ? head.num_classes : 1, true, config.init_method_std);
}

StepResult TaskHeadLayer::forward(const LayerContext& ctx, const TensorParallelism& tp,
                                  const Batch& batch, const Tensor& normed,
                                  std::uint64_t dropout_site, const StepOptions& options,
                                  PooledHeadRun& run) const {
  // finetune_utils' cross_entropy_loss_func: the micro-batch's mean, logged as "lm loss".
  const std::int64_t samples = batch.size(), classes = head_.num_classes;
  const double loss =
      run.forward(ctx, tp, pooler_, normed, samples * sequences_per_sample(head_), head_layer_,
                  classes, batch["label"], hidden_dropout_, dropout_site, options);
  StepResult result;
  result.losses.push_back({"lm loss", loss, 1});
  if (options.outputs) {
    // The scores as a (samples, classes) host tensor, and torch.argmax's first largest index.
    const Tensor device_scores = run.logits.view({samples, classes});
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
  return result;
}

Tensor TaskHeadLayer::backward(const LayerContext& ctx, const TensorParallelism& tp,
                               PooledHeadRun& run) const {
  // Only token 0's rows of normed have a gradient.
  Tensor dnormed = ctx.backend.empty({run.normed_rows, run.x0.size(1)}, run.x0.dtype());
  ctx.backend.fill(dnormed, 0.0);
  run.backward(ctx, tp, pooler_, head_layer_, dnormed);
  return dnormed;
}

}  // namespace megatron::nn
