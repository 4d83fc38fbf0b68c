// Language-model logits and cross-entropy, forward and backward in one pass, vocabulary-parallel
// under tensor parallelism.
#include "megatron/nn/lm_loss.h"

#include "megatron/nn/mixed_gemm.h"

namespace megatron::nn {

LmLossResult lm_loss(Backend& be, const Tensor& hidden_in, Parameter& weight, const Tensor& labels,
                     const Tensor& loss_mask, float loss_scale, Tensor* dhidden, DType compute,
                     const TensorParallelism& tp, Parameter* bias) {
  const std::int64_t rows = labels.numel(), vocab = weight.value.size(0);
  const std::int64_t h = hidden_in.size(1);
  const DType dt = hidden_in.dtype();
  const DType stat = dt == DType::f64 ? DType::f64 : DType::f32;
  // The output layer is column-parallel: under sequence parallelism its input is all-gathered.
  Tensor hidden = hidden_in;
  if (tp.sp()) {
    hidden = be.empty({rows, h}, dt);
    tp_gather_rows(tp, hidden_in, hidden);
  }
  const std::int64_t vocab_start = shard_runs(weight).front().global_offset;

  Tensor logits = be.empty({rows, vocab}, dt);
  mixed_gemm(be, hidden, false, weight.value, true, logits, compute);
  if (bias) be.bias_add(logits, bias->value, logits);
  Tensor row_max = be.empty({rows}, stat), loss = be.empty({rows}, stat);
  Tensor sums = be.empty({2, rows}, stat);  // sum_exp and target_logit, reduced in one call
  Tensor sum_exp = sums.select(0, 0), target_logit = sums.select(0, 1);
  be.cross_entropy_max(logits, row_max);
  tp_all_reduce(tp, row_max, ReduceOp::max);
  be.cross_entropy_sums(logits, labels, vocab_start, row_max, sum_exp, target_logit);
  tp_all_reduce(tp, sums);
  be.cross_entropy_loss(row_max, sum_exp, target_logit, loss);

  Tensor host_loss = Tensor::empty({rows}, stat);
  be.copy(loss, host_loss);
  const std::vector<double> per_token = host_loss.to_vector<double>();
  const std::vector<double> mask = loss_mask.to_vector<double>();
  LmLossResult result;
  for (std::size_t i = 0; i < per_token.size(); ++i) {
    result.loss_sum += mask[i] * per_token[i];
    result.token_count += mask[i];
  }
  if (!dhidden) return result;

  // d(loss_scale * sum(mask * loss) / count) / d loss_i = loss_scale * mask_i / count.
  const double count = result.token_count > 0 ? result.token_count : 1.0;
  std::vector<double> dloss_values(mask.size());
  for (std::size_t i = 0; i < mask.size(); ++i)
    dloss_values[i] = static_cast<double>(loss_scale) * mask[i] / count;
  Tensor dloss = be.empty({rows}, stat);
  be.copy(Tensor::from(dloss_values, {rows}).to(stat), dloss);
  be.cross_entropy_backward(logits, labels, vocab_start, row_max, sum_exp, dloss, logits);
  if (bias) be.bias_grad(logits, bias->grad, true);
  mixed_gemm(be, logits, true, hidden, false, weight.grad, compute, 1.0f, 1.0f);
  // Each rank's vocabulary slice contributes a partial sum of dhidden.
  if (tp.sp()) {
    Tensor partial = be.empty({rows, h}, dt);
    mixed_gemm(be, logits, false, weight.value, false, partial, compute);
    tp_reduce_scatter_rows(tp, partial, *dhidden);
  } else {
    mixed_gemm(be, logits, false, weight.value, false, *dhidden, compute);
    tp_all_reduce(tp, *dhidden);
  }
  return result;
}

}  // namespace megatron::nn
