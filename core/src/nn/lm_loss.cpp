// Language-model logits and cross-entropy, forward and backward in one pass, vocabulary-parallel
// under tensor parallelism.
#include "megatron/nn/lm_loss.h"

#include <vector>

#include "megatron/nn/mixed_gemm.h"

namespace megatron::nn {

namespace {

// The rows whose loss counts (mask != 0), when they are at most half of all rows (BERT's masked
// LM: about 15%): the logits of the other rows are never needed, and skipping them saves most of
// the output layer's GEMMs and cross-entropy passes. Otherwise (GPT: a few EOD or padding rows)
// none, and every row goes through one full GEMM, as always.
std::vector<std::int32_t> rows_worth_selecting(const std::vector<double>& mask) {
  std::vector<std::int32_t> kept;
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i] != 0) kept.push_back(static_cast<std::int32_t>(i));
  if (kept.size() * 2 > mask.size()) kept.clear();
  return kept;
}

}  // namespace

LmLossResult lm_loss(Backend& be, const Tensor& hidden_in, Parameter& weight, const Tensor& labels,
                     const Tensor& loss_mask, float loss_scale, Tensor* dhidden, DType compute,
                     const TensorParallelism& tp, Parameter* bias, LmTokenOutputs* outputs) {
  const std::int64_t all_rows = labels.numel(), vocab = weight.value.size(0);
  const std::int64_t h = hidden_in.size(1);
  const DType dt = hidden_in.dtype();
  const DType stat = dt == DType::f64 ? DType::f64 : DType::f32;
  // The output layer is column-parallel: under sequence parallelism its input is all-gathered.
  Tensor full_hidden = hidden_in;
  if (tp.sp()) {
    full_hidden = be.empty({all_rows, h}, dt);
    tp_gather_rows(tp, hidden_in, full_hidden);
  }
  const std::int64_t vocab_start = shard_runs(weight).front().global_offset;

  // Only the rows whose loss counts, when that saves work (the same rows on every rank).
  std::vector<double> mask = loss_mask.to_vector<double>();
  const std::vector<std::int32_t> kept = rows_worth_selecting(mask);
  const bool selecting = !kept.empty();
  const std::int64_t rows = selecting ? static_cast<std::int64_t>(kept.size()) : all_rows;
  Tensor hidden = full_hidden, row_labels = labels, row_ids;
  if (selecting) {
    row_ids = be.empty({rows}, DType::i32);
    be.copy(Tensor::from(kept, {rows}), row_ids);
    hidden = be.empty({rows, h}, dt);
    be.embedding_forward(row_ids, full_hidden, 0, hidden);  // a row gather
    Tensor all_labels = Tensor::empty({all_rows}, labels.dtype());
    be.copy(labels, all_labels);
    const std::vector<std::int32_t> label_values = all_labels.to_vector<std::int32_t>();
    std::vector<std::int32_t> kept_labels;
    std::vector<double> kept_mask;
    for (std::int32_t r : kept) {
      kept_labels.push_back(label_values[static_cast<std::size_t>(r)]);
      kept_mask.push_back(mask[static_cast<std::size_t>(r)]);
    }
    row_labels = be.empty({rows}, DType::i32);
    be.copy(Tensor::from(kept_labels, {rows}), row_labels);
    mask = std::move(kept_mask);
  }

  Tensor logits = be.empty({rows, vocab}, dt);
  mixed_gemm(be, hidden, false, weight.value, true, logits, compute);
  if (bias) be.bias_add(logits, bias->value, logits);
  Tensor row_max = be.empty({rows}, stat), loss = be.empty({rows}, stat);
  Tensor sums = be.empty({2, rows}, stat);  // sum_exp and target_logit, reduced in one call
  Tensor sum_exp = sums.select(0, 0), target_logit = sums.select(0, 1);
  be.cross_entropy_max(logits, row_max);
  tp_all_reduce(tp, row_max, ReduceOp::max);
  be.cross_entropy_sums(logits, row_labels, vocab_start, row_max, sum_exp, target_logit);
  tp_all_reduce(tp, sums);
  be.cross_entropy_loss(row_max, sum_exp, target_logit, loss);

  Tensor host_loss = Tensor::empty({rows}, stat);
  be.copy(loss, host_loss);
  const std::vector<double> per_token = host_loss.to_vector<double>();
  LmLossResult result;
  for (std::size_t i = 0; i < per_token.size(); ++i) {
    result.loss_sum += mask[i] * per_token[i];
    result.token_count += mask[i];
  }
  if (outputs) {
    Tensor argmax = be.empty({rows}, DType::i64);
    be.cross_entropy_argmax(logits, row_max, vocab_start, argmax);
    tp_all_reduce(tp, argmax, ReduceOp::min);
    Tensor host_argmax = Tensor::empty({rows}, DType::i64);
    be.copy(argmax, host_argmax);
    const std::vector<std::int64_t> predicted = host_argmax.to_vector<std::int64_t>();
    std::vector<float> loss_out(static_cast<std::size_t>(all_rows), 0.0f);
    std::vector<std::int64_t> argmax_out(static_cast<std::size_t>(all_rows), -1);
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto row = static_cast<std::size_t>(selecting ? kept[static_cast<std::size_t>(i)] : i);
      loss_out[row] = static_cast<float>(per_token[static_cast<std::size_t>(i)]);
      argmax_out[row] = predicted[static_cast<std::size_t>(i)];
    }
    outputs->loss = Tensor::from(loss_out, {all_rows});
    outputs->argmax = Tensor::from(argmax_out, {all_rows});
  }
  if (!dhidden) return result;

  // d(loss_scale * sum(mask * loss) / count) / d loss_i = loss_scale * mask_i / count.
  const double count = result.token_count > 0 ? result.token_count : 1.0;
  std::vector<double> dloss_values(mask.size());
  for (std::size_t i = 0; i < mask.size(); ++i)
    dloss_values[i] = static_cast<double>(loss_scale) * mask[i] / count;
  Tensor dloss = be.empty({rows}, stat);
  be.copy(Tensor::from(dloss_values, {rows}).to(stat), dloss);
  be.cross_entropy_backward(logits, row_labels, vocab_start, row_max, sum_exp, dloss, logits);
  if (bias) be.bias_grad(logits, bias->grad, true);
  mixed_gemm(be, logits, true, hidden, false, weight.grad, compute, 1.0f, 1.0f);
  // Each rank's vocabulary slice contributes a partial sum of dhidden; skipped rows get zeros.
  const bool whole = !tp.sp() && !selecting;
  Tensor partial = whole ? *dhidden : be.empty({all_rows, h}, dt);
  if (selecting) {
    Tensor kept_partial = be.empty({rows, h}, dt);
    mixed_gemm(be, logits, false, weight.value, false, kept_partial, compute);
    be.embedding_backward(row_ids, kept_partial, 0, partial, false);  // scatter, zeros elsewhere
  } else {
    mixed_gemm(be, logits, false, weight.value, false, partial, compute);
  }
  if (tp.sp()) {
    tp_reduce_scatter_rows(tp, partial, *dhidden);
  } else {
    if (!whole) be.copy(partial, *dhidden);
    tp_all_reduce(tp, *dhidden);
  }
  return result;
}

}  // namespace megatron::nn
