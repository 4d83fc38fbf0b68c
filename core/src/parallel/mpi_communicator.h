// MPI-backed Communicator (private to the core: the SDK never exposes mpi.h).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megatron/parallel/communicator.h"

namespace megatron::detail {

// Throws megatron::Error "<operation> failed: <MPI error string>" when rc is not MPI_SUCCESS.
void check_mpi(int rc, std::string_view operation);

// The MPI datatype for element-wise reductions, or MPI_DATATYPE_NULL for dtypes MPI has no
// standard type for (bf16, f16; see mpi_half_ops below).
MPI_Datatype mpi_type(DType dtype);

// bf16 and f16 reductions go through user-defined MPI_Ops on a 2-byte contiguous datatype that
// accumulate each pair of elements in fp32. MpiRuntime creates them once after MPI_Init and frees
// them before MPI_Finalize; both calls are idempotent. Reductions of bf16/f16 throw until created.
void create_mpi_half_ops();
void free_mpi_half_ops();

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
  const std::string& name() const override { return name_; }
  MPI_Comm handle() const { return comm_; }

 protected:
  void all_reduce_impl(void* buf, std::size_t count, DType dtype, ReduceOp op) override;
  void broadcast_impl(void* buf, std::size_t count, DType dtype, int root) override;
  void barrier_impl() override;
  CommHandle all_reduce_async_impl(void* buf, std::size_t count, DType dtype, ReduceOp op) override;
  CommHandle reduce_scatter_impl(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                 ReduceOp op) override;
  CommHandle all_gather_impl(const void* send, void* recv, std::size_t send_count,
                             DType dtype) override;
  CommHandle all_to_all_v_impl(const void* send, const std::vector<std::size_t>& send_counts,
                               void* recv, const std::vector<std::size_t>& recv_counts,
                               DType dtype) override;
  CommHandle send_impl(const void* buf, std::size_t count, DType dtype, int peer, int tag) override;
  CommHandle recv_impl(void* buf, std::size_t count, DType dtype, int peer, int tag) override;

 private:
  MpiCommunicator(MPI_Comm comm, std::vector<int> global_ranks, std::string name);
  // Messages are built only on failure: these calls sit on the gradient-reduction hot path.
  void check(int rc, std::string_view mpi_call) const;
  [[noreturn]] void throw_unsupported(std::string_view operation, DType dtype) const;
  // The datatype and op for reducing `dtype` (user-defined ones for bf16/f16).
  std::pair<MPI_Datatype, MPI_Op> reduction(std::string_view operation, DType dtype,
                                            ReduceOp op) const;
  // Refuses per-rank counts MPI's int counts cannot express in one collective.
  int block_count(std::string_view operation, std::size_t count) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;  // the MPI standard's guaranteed minimum, raised to MPI_TAG_UB on creation
  std::vector<int> global_ranks_;
  std::string name_;
};

}  // namespace megatron::detail
