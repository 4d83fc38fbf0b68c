// The one-member communicator used when the program runs without an MPI launcher.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "megatron/error.h"
#include "megatron/parallel/communicator.h"

namespace megatron {
namespace {

class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator(int global_rank, std::string name)
      : global_ranks_{global_rank}, name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  const std::string& name() const override { return name_; }

 protected:
  // With a single member the reduced value and the root's value are the buffer itself.
  void all_reduce_impl(void*, std::size_t, DType, ReduceOp) override {}
  void broadcast_impl(void*, std::size_t, DType, int) override {}
  void barrier_impl() override {}
  CommHandle all_reduce_async_impl(void*, std::size_t, DType, ReduceOp) override { return {}; }

  // A reduction over one block is that block; the gather of one block is that block. The base
  // class allows only exact aliasing (send == recv), for which memmove is a no-op copy.
  CommHandle reduce_scatter_impl(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                 ReduceOp) override {
    std::memmove(recv, send, recv_count * dtype_size(dtype));
    return {};
  }
  CommHandle all_gather_impl(const void* send, void* recv, std::size_t send_count,
                             DType dtype) override {
    std::memmove(recv, send, send_count * dtype_size(dtype));
    return {};
  }

  CommHandle all_to_all_v_impl(const void* send, const std::vector<std::size_t>& send_counts,
                               void* recv, const std::vector<std::size_t>& recv_counts,
                               DType dtype) override {
    if (send_counts[0] != recv_counts[0]) {
      throw Error("all_to_all on the " + name_ + " group: this rank sends itself " +
                  std::to_string(send_counts[0]) + " elements but expects " +
                  std::to_string(recv_counts[0]));
    }
    if (send_counts[0] > 0) std::memcpy(recv, send, send_counts[0] * dtype_size(dtype));
    return {};
  }

  // Unreachable: the base class refuses every peer of a group of one (out of range or itself).
  CommHandle send_impl(const void*, std::size_t, DType, int peer, int) override {
    throw Error("send on the " + name_ + " group: no peer " + std::to_string(peer));
  }
  CommHandle recv_impl(void*, std::size_t, DType, int peer, int) override {
    throw Error("recv on the " + name_ + " group: no peer " + std::to_string(peer));
  }

 private:
  std::vector<int> global_ranks_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(int global_rank, std::string name) {
  return std::make_unique<SelfCommunicator>(global_rank, std::move(name));
}

}  // namespace megatron
