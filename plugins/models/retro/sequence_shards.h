// Sequence parallelism around Retro's blocks, which need whole sequences (chunks cut across the
// shards, the retrieval encoder over whole neighbours): the local shard gathered into the full
// tensor, and this rank's shard of a full tensor that every rank holds alike.
#pragma once

#include "megatron/backend/backend.h"
#include "megatron/nn/tensor_parallel.h"

namespace megatron::retro {

// The full (S, ...) tensor from this rank's (S / tp, ...) shard; the shard itself without
// sequence parallelism.
inline Tensor gather_sequence(Backend& be, const nn::TensorParallelism& tp, const Tensor& shard) {
  if (!tp.sp()) return shard;
  Shape full_shape = shard.shape();
  full_shape[0] *= tp.size;
  Tensor full = be.empty(full_shape, shard.dtype());
  nn::tp_gather_rows(tp, shard.contiguous(), full);
  return full;
}

// Copies this rank's rows of `full` (identical on every rank) into `shard`; all of it without
// sequence parallelism.
inline void copy_own_rows(Backend& be, const nn::TensorParallelism& tp, const Tensor& full,
                          Tensor& shard) {
  const std::int64_t rows = shard.size(0);
  be.copy(tp.sp() ? full.slice(0, tp.rank * rows, rows) : full, shard);
}

}  // namespace megatron::retro
