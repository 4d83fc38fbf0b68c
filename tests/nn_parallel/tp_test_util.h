// Shared helpers of the tensor-parallel tests: the 2-rank tensor group, shards of global tensors,
// and tolerance checks.
#pragma once

#include <cstdint>
#include <string>

#include "megatron/nn/init.h"
#include "megatron/nn/tensor_parallel.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::tp_test {

// The world as one tensor-parallel group (the tests run on 2 ranks).
ParallelState& state();
nn::TensorParallelism tensor_group(bool sequence_parallel);

// This rank's shard of `global` (a host tensor of p.global_shape), as p's partition fields say.
Tensor shard_of(const Parameter& p, const Tensor& global);
// Rows [rank * n / size, (rank + 1) * n / size) of dim 0: a sequence shard of (S, ...) or of
// (S * B, ...) rows.
Tensor sequence_shard(const Tensor& t, const nn::TensorParallelism& tp);
// Sums the gradients of sequence_parallel parameters over the group, as the trainer does before
// the optimizer.
void reduce_sequence_parallel_grads(ParameterSet& params, const nn::TensorParallelism& tp);

// A host tensor of normal(0, std) values from a fixed seed (the same on every rank).
Tensor random_tensor(const Shape& shape, unsigned seed, double std = 1.0);

// max |got - want| <= tol * max(max |want|, floor): the fp32 checks compare against the
// tensor's scale, since split GEMMs only reorder sums.
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what,
                  double floor = 1e-3);

}  // namespace megatron::tp_test
