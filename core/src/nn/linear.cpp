// Linear layer forward and backward through the backend's GEMM.
#include "megatron/nn/linear.h"

namespace megatron::nn {

Linear Linear::declare(ParamFactory& factory, const std::string& prefix, std::int64_t in,
                       std::int64_t out, bool bias, float init_std, TensorParallel parallel) {
  Linear l;
  l.weight = &factory.declare(prefix + ".weight", {out, in}, ParamInit::normal, init_std);
  if (bias) l.bias = &factory.declare(prefix + ".bias", {out}, ParamInit::zeros, 0, false);
  if (parallel == TensorParallel::column) {
    l.weight->partition_dim = 0;
    if (l.bias) l.bias->partition_dim = 0;
  } else if (parallel == TensorParallel::row) {
    l.weight->partition_dim = 1;
  }
  return l;
}

void Linear::forward(Backend& backend, const Tensor& x, Tensor& y) const {
  backend.gemm(x, false, weight->value, true, y);
  if (bias) backend.bias_add(y, bias->value, y);
}

void Linear::backward(Backend& backend, const Tensor& x, const Tensor& dy, Tensor* dx) const {
  backend.gemm(dy, true, x, false, weight->grad, 1.0f, 1.0f);
  if (bias) backend.bias_grad(dy, bias->grad, true);
  if (dx) backend.gemm(dy, false, weight->value, false, *dx);
}

}  // namespace megatron::nn
