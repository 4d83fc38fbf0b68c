// Language-model logits and cross-entropy, forward and backward in one pass.
#include "megatron/nn/lm_loss.h"

#include "megatron/nn/mixed_gemm.h"

namespace megatron::nn {

LmLossResult lm_loss(Backend& be, const Tensor& hidden, Parameter& weight, const Tensor& labels,
                     const Tensor& loss_mask, float loss_scale, Tensor* dhidden, DType compute) {
  const std::int64_t rows = hidden.size(0), vocab = weight.value.size(0);
  const DType dt = hidden.dtype();
  const DType stat = dt == DType::f64 ? DType::f64 : DType::f32;
  Tensor logits = be.empty({rows, vocab}, dt);
  mixed_gemm(be, hidden, false, weight.value, true, logits, compute);
  Tensor row_max = be.empty({rows}, stat), sum_exp = be.empty({rows}, stat),
         target_logit = be.empty({rows}, stat), loss = be.empty({rows}, stat);
  be.cross_entropy_max(logits, row_max);
  be.cross_entropy_sums(logits, labels, 0, row_max, sum_exp, target_logit);
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
  be.cross_entropy_backward(logits, labels, 0, row_max, sum_exp, dloss, logits);
  mixed_gemm(be, logits, true, hidden, false, weight.grad, compute, 1.0f, 1.0f);
  mixed_gemm(be, logits, false, weight.value, false, *dhidden, compute);
  return result;
}

}  // namespace megatron::nn
