// A linear layer in Megatron's weight layout: y = x W^T + b with W (out, in), optionally split
// over a tensor-parallel group as Megatron's ColumnParallelLinear / RowParallelLinear.
#pragma once

#include <string>
#include <vector>

#include "megatron/nn/init.h"

namespace megatron::nn {

// How tensor parallelism splits a linear layer: column splits the output features (weight dim 0,
// bias too), row splits the input features (weight dim 1; the bias is added after the reduction,
// so it is replicated).
enum class TensorParallel { none, column, row };

// With a group of size t (the factory's), the layer communicates as Megatron's mappings do:
//  column: x (rows, in) -> y (rows, out / t); forward identity, backward all-reduce of dx (f).
//          Sequence parallel: x is a (rows / t, in) sequence shard, all-gathered forward;
//          dx is reduce-scattered backward.
//  row:    x (rows, in / t) -> y (rows, out); forward all-reduce, backward identity (g).
//          Sequence parallel: y is reduce-scattered to a (rows / t, out) shard forward, dy
//          all-gathered backward; the bias is added to the shard and marked sequence_parallel.
struct Linear {
  Parameter* weight = nullptr;  // (out, in) globally; the local shard
  Parameter* bias = nullptr;    // (out) or none
  TensorParallel parallel = TensorParallel::none;
  TensorParallelism tp;

  // `blocks` > 1 splits each of that many equal blocks of the output features separately
  // (SwiGLU's [gate; up]: column-parallel only).
  static Linear declare(ParamFactory& factory, const std::string& prefix, std::int64_t in,
                        std::int64_t out, bool bias, float init_std,
                        TensorParallel parallel = TensorParallel::none, int blocks = 1);

  // Column-parallel with unequal output blocks, each split over the group separately (the Mamba
  // mixer's in_proj [z, x, B, C, dt]): rank r's output is [block_0 slice r, block_1 slice r, ...].
  static Linear declare_column_blocks(ParamFactory& factory, const std::string& prefix,
                                      std::int64_t in, const std::vector<std::int64_t>& blocks,
                                      bool bias, float init_std);

  // Shapes as above; `compute` bf16/f16 runs the GEMM on inputs cast to it.
  void forward(Backend& backend, const Tensor& x, Tensor& y, DType compute = DType::f32) const;
  // x as given to forward; accumulates dW and db; dx (shaped as x) is overwritten when not null.
  void backward(Backend& backend, const Tensor& x, const Tensor& dy, Tensor* dx,
                DType compute = DType::f32) const;
};

}  // namespace megatron::nn
