// Argument checks shared by every Communicator implementation, done once before dispatch.
#include "megatron/parallel/communicator.h"

#include <string>

#include "megatron/error.h"

namespace megatron {
namespace {

void check_buffer(const char* op, const void* buf, std::size_t count, DType dtype) {
  if (buf == nullptr) {
    throw Error(std::string(op) + ": buffer is null but count is " + std::to_string(count));
  }
  if (dtype_size(dtype) == 0) {
    throw Error(std::string(op) + ": unknown dtype value " +
                std::to_string(static_cast<int>(dtype)));
  }
}

}  // namespace

Communicator::~Communicator() = default;

void Communicator::all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  check_buffer("all_reduce", buf, count, dtype);
  if (op != ReduceOp::sum && op != ReduceOp::max && op != ReduceOp::min) {
    throw Error("all_reduce: unknown reduce op value " + std::to_string(static_cast<int>(op)));
  }
  all_reduce_impl(buf, count, dtype, op);
}

void Communicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  if (root < 0 || root >= size()) {
    throw Error("broadcast: root " + std::to_string(root) + " is outside the group of size " +
                std::to_string(size()) + " (expected 0.." + std::to_string(size() - 1) + ")");
  }
  if (count == 0) return;
  check_buffer("broadcast", buf, count, dtype);
  broadcast_impl(buf, count, dtype, root);
}

void Communicator::barrier() {
  barrier_impl();
}

}  // namespace megatron
