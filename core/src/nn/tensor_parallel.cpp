// Megatron's tensor/sequence-parallel mappings over a Communicator, on contiguous tensors.
#include "megatron/nn/tensor_parallel.h"

#include <string>

#include "megatron/error.h"

namespace megatron::nn {

namespace {

Communicator& group(const TensorParallelism& tp, const char* op) {
  if (!tp.comm) {
    throw Error(std::string(op) + ": a layer split over " + std::to_string(tp.size) +
                " tensor-parallel ranks has no communicator (built on the meta device?)");
  }
  if (tp.comm->size() != tp.size || tp.comm->rank() != tp.rank) {
    throw Error(std::string(op) + ": the tensor-parallel communicator has rank " +
                std::to_string(tp.comm->rank()) + " of " + std::to_string(tp.comm->size()) +
                ", the layer was built for rank " + std::to_string(tp.rank) + " of " +
                std::to_string(tp.size));
  }
  return *tp.comm;
}

void check_contiguous(const Tensor& t, const char* op, const char* what) {
  if (!t.is_contiguous())
    throw Error(std::string(op) + ": " + what + " must be contiguous, got " + t.describe());
}

}  // namespace

void tp_all_reduce(const TensorParallelism& tp, Tensor& t, ReduceOp op) {
  if (!tp.split()) return;
  check_contiguous(t, "tp_all_reduce", "the tensor");
  group(tp, "tp_all_reduce")
      .all_reduce(t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), op);
}

void tp_gather_rows(const TensorParallelism& tp, const Tensor& shard, Tensor& full) {
  check_contiguous(shard, "tp_gather_rows", "shard");
  check_contiguous(full, "tp_gather_rows", "full");
  if (full.numel() != shard.numel() * tp.size || full.dtype() != shard.dtype()) {
    throw Error("tp_gather_rows: full " + full.describe() + " is not " + std::to_string(tp.size) +
                " x shard " + shard.describe());
  }
  group(tp, "tp_gather_rows")
      .all_gather(shard.raw_data(), full.raw_data(), static_cast<std::size_t>(shard.numel()),
                  shard.dtype());
}

void tp_reduce_scatter_rows(const TensorParallelism& tp, const Tensor& full, Tensor& shard) {
  check_contiguous(shard, "tp_reduce_scatter_rows", "shard");
  check_contiguous(full, "tp_reduce_scatter_rows", "full");
  if (full.numel() != shard.numel() * tp.size || full.dtype() != shard.dtype()) {
    throw Error("tp_reduce_scatter_rows: full " + full.describe() + " is not " +
                std::to_string(tp.size) + " x shard " + shard.describe());
  }
  group(tp, "tp_reduce_scatter_rows")
      .reduce_scatter(full.raw_data(), shard.raw_data(), static_cast<std::size_t>(shard.numel()),
                      shard.dtype(), ReduceOp::sum);
}

}  // namespace megatron::nn
