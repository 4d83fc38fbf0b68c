// The one-member communicator used when the program runs without an MPI launcher.
#include <memory>
#include <vector>

#include "megatron/parallel/communicator.h"

namespace megatron {
namespace {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(int global_rank) : global_ranks_{global_rank} {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }

 protected:
  // With a single member the reduced value and the root's value are the buffer itself.
  void all_reduce_impl(void*, std::size_t, DType, ReduceOp) override {}
  void broadcast_impl(void*, std::size_t, DType, int) override {}
  void barrier_impl() override {}

 private:
  std::vector<int> global_ranks_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(int global_rank) {
  return std::make_unique<SelfCommunicator>(global_rank);
}

}  // namespace megatron
