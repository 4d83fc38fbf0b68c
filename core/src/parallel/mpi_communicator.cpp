// MPI implementation of Communicator: one MPI_Comm per process group.
#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>

#include "megatron/error.h"

namespace megatron::detail {
namespace {

// MPI counts are int; larger buffers go in chunks of this many elements.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  throw Error("all_reduce: unknown reduce op value " + std::to_string(static_cast<int>(op)));
}

}  // namespace

void check_mpi(int rc, std::string_view operation) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  std::string msg = std::string(operation) + " failed: ";
  msg += len > 0 ? std::string(text, static_cast<std::size_t>(len))
                 : "MPI error code " + std::to_string(rc);
  throw Error(msg);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16:
      break;
  }
  return MPI_DATATYPE_NULL;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::dup_world(std::string name) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup(MPI_COMM_WORLD)");
  const int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) MPI_Comm_free(&comm);
  check_mpi(rc, "MPI_Comm_set_errhandler");
  auto world = std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm, {}, std::move(name)));
  world->global_ranks_.resize(static_cast<std::size_t>(world->size_));
  std::iota(world->global_ranks_.begin(), world->global_ranks_.end(), 0);
  return world;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        std::vector<int> global_ranks,
                                                        std::string name) const {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &comm),
            "MPI_Comm_split for the " + name + " group");
  if (comm == MPI_COMM_NULL) return nullptr;
  auto result = std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(comm, std::move(global_ranks), std::move(name)));
  // The split must reproduce the table exactly, or ranks would disagree on who is who.
  if (result->size_ != static_cast<int>(result->global_ranks_.size()) || result->rank_ != key) {
    throw Error("MPI_Comm_split for the " + result->name_ + " group produced size " +
                std::to_string(result->size_) + " and rank " + std::to_string(result->rank_) +
                ", expected size " + std::to_string(result->global_ranks_.size()) + " and rank " +
                std::to_string(key));
  }
  return result;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::vector<int> global_ranks, std::string name)
    : comm_(comm), global_ranks_(std::move(global_ranks)), name_(std::move(name)) {
  // Constructors own `comm` from the first line, so a throw below must release it.
  int rc = MPI_Comm_rank(comm_, &rank_);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm_, &size_);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm_);
    check(rc, "MPI_Comm_rank/MPI_Comm_size");
  }
}

MpiCommunicator::~MpiCommunicator() {
  // Freeing after MPI_Finalize is erroneous; a ParallelState outliving its MpiRuntime just leaks.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check(int rc, std::string_view mpi_call) const {
  if (rc != MPI_SUCCESS) check_mpi(rc, std::string(mpi_call) + " on the " + name_ + " group");
}

void MpiCommunicator::throw_unsupported(std::string_view operation, DType dtype) const {
  throw Error(std::string(operation) + " on the " + name_ + " group: dtype " +
              std::string(dtype_name(dtype)) +
              " is not supported by the MPI communicator (supported: float32, float64, int32, "
              "int64, uint8)");
}

void MpiCommunicator::all_reduce_impl(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  const MPI_Datatype type = mpi_type(dtype);
  if (type == MPI_DATATYPE_NULL) throw_unsupported("all_reduce", dtype);
  const MPI_Op mop = mpi_op(op);
  auto* bytes = static_cast<std::uint8_t*>(buf);
  const std::size_t elem = dtype_size(dtype);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    check(MPI_Allreduce(MPI_IN_PLACE, bytes + done * elem, static_cast<int>(n), type, mop, comm_),
          "MPI_Allreduce");
    done += n;
  }
}

void MpiCommunicator::broadcast_impl(void* buf, std::size_t count, DType dtype, int root) {
  // A broadcast only moves bits, so 16-bit floats travel as uint16 even though MPI cannot reduce
  // them.
  MPI_Datatype type = mpi_type(dtype);
  if (dtype == DType::bf16 || dtype == DType::f16) type = MPI_UINT16_T;
  if (type == MPI_DATATYPE_NULL) throw_unsupported("broadcast", dtype);
  auto* bytes = static_cast<std::uint8_t*>(buf);
  const std::size_t elem = dtype_size(dtype);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    check(MPI_Bcast(bytes + done * elem, static_cast<int>(n), type, root, comm_), "MPI_Bcast");
    done += n;
  }
}

void MpiCommunicator::barrier_impl() {
  check(MPI_Barrier(comm_), "MPI_Barrier");
}

}  // namespace megatron::detail
