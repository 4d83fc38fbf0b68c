// Tensor and sequence parallelism for the nn layers: the group a layer is split over, and
// Megatron's communication mappings (core/tensor_parallel/mappings.py) on contiguous tensors.
#pragma once

#include <cstdint>

#include "megatron/parallel/communicator.h"
#include "megatron/tensor/tensor.h"

namespace megatron::nn {

// The tensor-parallel group of a layer. The default (size 1) is an unsplit layer. `comm` may be
// null on the meta device (`plan` declares shards without ever communicating).
struct TensorParallelism {
  Communicator* comm = nullptr;
  int rank = 0;
  int size = 1;
  // Megatron's sequence parallelism: activations outside the tensor-parallel regions (norms,
  // dropout, residuals) are (S / size, B, h) sequence shards. Ignored when size is 1.
  bool sequence_parallel = false;

  bool split() const { return size > 1; }
  bool sp() const { return sequence_parallel && size > 1; }
};

// The expert-parallel group of an MoE layer (Megatron's expert_model_parallel_size): rank r holds
// experts [r * E / size, (r + 1) * E / size) whole, and tokens travel to their experts' ranks by
// all-to-all. It is carved out of the data-parallel ranks, so its members see different tokens.
// The default (size 1) holds every expert. `comm` may be null on the meta device.
struct ExpertParallelism {
  Communicator* comm = nullptr;
  int rank = 0;
  int size = 1;
  int tensor_size = 1;  // expert_tensor_parallel_size: MoE layers refuse > 1 for now

  bool split() const { return size > 1; }
};

// In-place reduction over the group (Megatron's reduce_from_tensor_model_parallel_region forward
// and copy_to_tensor_model_parallel_region backward). No-op when not split.
void tp_all_reduce(const TensorParallelism& tp, Tensor& t, ReduceOp op = ReduceOp::sum);
// full (size * n, ...) = the members' shards (n, ...) stacked along dim 0 in rank order
// (gather_from_sequence_parallel_region). Since activations are (S, B, h) row-major, a sequence
// shard is a block of contiguous rows.
void tp_gather_rows(const TensorParallelism& tp, const Tensor& shard, Tensor& full);
// shard (n, ...) = block `rank` of the group sum of full (size * n, ...)
// (reduce_scatter_to_sequence_parallel_region).
void tp_reduce_scatter_rows(const TensorParallelism& tp, const Tensor& full, Tensor& shard);

// Rows of the full sequence for a tensor of `local_rows` rows: x size under sequence parallelism.
inline std::int64_t tp_full_rows(const TensorParallelism& tp, std::int64_t local_rows) {
  return tp.sp() ? local_rows * tp.size : local_rows;
}
// Philox offset of this rank's first element of a sequence-sharded tensor of `local_numel`
// elements: under sequence parallelism a shard's elements are the global tensor's elements
// rank * local_numel onwards, so dropout masks equal the unsplit run's.
inline std::uint64_t tp_sequence_offset(const TensorParallelism& tp, std::int64_t local_numel) {
  return tp.sp() ? static_cast<std::uint64_t>(tp.rank) * static_cast<std::uint64_t>(local_numel)
                 : 0;
}

}  // namespace megatron::nn
