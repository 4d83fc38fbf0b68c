// LayerNorm / RMSNorm forward and backward.
#include "megatron/nn/norm.h"

namespace megatron::nn {

namespace {

Norm declare_norm(ParamFactory& factory, const std::string& weight_name,
                  const std::string& bias_name, std::int64_t hidden, NormKind kind, float eps) {
  Norm n;
  n.kind = kind;
  n.eps = eps;
  n.weight = &factory.declare(weight_name, {hidden}, ParamInit::ones, 0, false);
  if (kind == NormKind::layernorm)
    n.bias = &factory.declare(bias_name, {hidden}, ParamInit::zeros, 0, false);
  // Under sequence parallelism a norm runs on the rank's sequence shard: its replicated
  // parameters get partial gradients, all-reduced over the tensor-parallel group by the trainer.
  n.weight->sequence_parallel = factory.tp.sp();
  if (n.bias) n.bias->sequence_parallel = factory.tp.sp();
  return n;
}

}  // namespace

Norm Norm::declare(ParamFactory& factory, const std::string& prefix, std::int64_t hidden,
                   NormKind kind, float eps) {
  return declare_norm(factory, prefix + ".weight", prefix + ".bias", hidden, kind, eps);
}

Norm Norm::declare_fused(ParamFactory& factory, const std::string& linear_prefix,
                         std::int64_t hidden, NormKind kind, float eps) {
  return declare_norm(factory, linear_prefix + ".layer_norm_weight",
                      linear_prefix + ".layer_norm_bias", hidden, kind, eps);
}

void Norm::forward(Backend& backend, const Tensor& x, Tensor& y, Saved& saved) const {
  const DType stat = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Shape rows = {x.size(0)};
  saved.rstd = backend.empty(rows, stat);
  if (kind == NormKind::layernorm) {
    saved.mean = backend.empty(rows, stat);
    backend.layernorm_forward(x, weight->value, bias ? &bias->value : nullptr, eps, y, saved.mean,
                              saved.rstd);
  } else {
    backend.rmsnorm_forward(x, weight->value, eps, y, saved.rstd);
  }
}

void Norm::backward(Backend& backend, const Tensor& dy, const Tensor& x, const Saved& saved,
                    Tensor& dx) const {
  if (kind == NormKind::layernorm) {
    backend.layernorm_backward(dy, x, weight->value, saved.mean, saved.rstd, dx, weight->grad,
                               bias ? &bias->grad : nullptr, true);
  } else {
    backend.rmsnorm_backward(dy, x, weight->value, saved.rstd, dx, weight->grad, true);
  }
}

}  // namespace megatron::nn
