// MPI-backed Communicator (private to the core: the SDK never exposes mpi.h).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/parallel/communicator.h"

namespace megatron::detail {

// Throws megatron::Error "<operation> failed: <MPI error string>" when rc is not MPI_SUCCESS.
void check_mpi(int rc, std::string_view operation);

// The MPI datatype for element-wise reductions, or MPI_DATATYPE_NULL for dtypes MPI has no
// standard type for (bf16, f16).
MPI_Datatype mpi_type(DType dtype);

class MpiCommunicator final : public Communicator {
 public:
  // A private duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so failures become exceptions
  // and never abort the job behind our back; communicators split from it inherit the handler.
  static std::unique_ptr<MpiCommunicator> dup_world(std::string name);

  // Collective over the members of *this: every member must call it. Members passing the same
  // `color` end up in one group, ordered by `key`. A negative color means "not in any group" and
  // returns nullptr. `global_ranks` (the expected members, by key) and `name` label the result.
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::vector<int> global_ranks,
                                         std::string name) const;

  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  MPI_Comm handle() const { return comm_; }
  const std::string& name() const { return name_; }

 protected:
  void all_reduce_impl(void* buf, std::size_t count, DType dtype, ReduceOp op) override;
  void broadcast_impl(void* buf, std::size_t count, DType dtype, int root) override;
  void barrier_impl() override;

 private:
  MpiCommunicator(MPI_Comm comm, std::vector<int> global_ranks, std::string name);
  // Messages are built only on failure: these calls sit on the gradient-reduction hot path.
  void check(int rc, std::string_view mpi_call) const;
  [[noreturn]] void throw_unsupported(std::string_view operation, DType dtype) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> global_ranks_;
  std::string name_;
};

}  // namespace megatron::detail
