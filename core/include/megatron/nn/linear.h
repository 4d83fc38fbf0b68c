// A linear layer in Megatron's weight layout: y = x W^T + b with W (out, in).
#pragma once

#include <string>

#include "megatron/nn/init.h"

namespace megatron::nn {

// How tensor parallelism splits a linear layer (Megatron's ColumnParallelLinear /
// RowParallelLinear): column splits the output features (weight dim 0, bias too), row splits the
// input features (weight dim 1; the bias is added after the reduction, so it is replicated).
enum class TensorParallel { none, column, row };

struct Linear {
  Parameter* weight = nullptr;  // (out, in)
  Parameter* bias = nullptr;    // (out) or none

  static Linear declare(ParamFactory& factory, const std::string& prefix, std::int64_t in,
                        std::int64_t out, bool bias, float init_std,
                        TensorParallel parallel = TensorParallel::none);

  // x (rows, in) -> y (rows, out); `compute` bf16/f16 runs the GEMM on inputs cast to it.
  void forward(Backend& backend, const Tensor& x, Tensor& y, DType compute = DType::f32) const;
  // Accumulates dW and db; dx (rows, in) is overwritten when not null.
  void backward(Backend& backend, const Tensor& x, const Tensor& dy, Tensor* dx,
                DType compute = DType::f32) const;
};

}  // namespace megatron::nn
