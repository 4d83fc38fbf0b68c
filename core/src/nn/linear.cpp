// Linear layer forward and backward through the backend's GEMM.
#include "megatron/nn/linear.h"

#include "megatron/nn/mixed_gemm.h"

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

void Linear::forward(Backend& backend, const Tensor& x, Tensor& y, DType compute) const {
  mixed_gemm(backend, x, false, weight->value, true, y, compute);
  if (bias) backend.bias_add(y, bias->value, y);
}

void Linear::backward(Backend& backend, const Tensor& x, const Tensor& dy, Tensor* dx,
                      DType compute) const {
  mixed_gemm(backend, dy, true, x, false, weight->grad, compute, 1.0f, 1.0f);
  if (bias) backend.bias_grad(dy, bias->grad, true);
  if (dx) mixed_gemm(backend, dy, false, weight->value, false, *dx, compute);
}

}  // namespace megatron::nn
