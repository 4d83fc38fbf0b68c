// MPI implementation of Communicator: one MPI_Comm per process group.
#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>

#include "megatron/error.h"
#include "megatron/tensor/half.h"

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

// Point-to-point and gathers only move bits, so 16-bit floats travel as uint16.
MPI_Datatype transfer_type(DType dtype) {
  if (dtype == DType::bf16 || dtype == DType::f16) return MPI_UINT16_T;
  return mpi_type(dtype);
}

// Combines two 16-bit floats in fp32 and rounds once, as a GPU reduction kernel does. MPI may
// combine partial results in any tree, so each pairwise step rounds to the 16-bit type.
template <typename Half, ReduceOp Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    Half x, y;
    x.bits = a[i];
    y.bits = b[i];
    const float fx = static_cast<float>(x);
    const float fy = static_cast<float>(y);
    float r = fx + fy;
    if constexpr (Op == ReduceOp::max) r = std::max(fx, fy);
    if constexpr (Op == ReduceOp::min) r = std::min(fx, fy);
    b[i] = Half::from_float(r);
  }
}

struct HalfOps {
  bool created = false;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op ops[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                      {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};  // [bf16, f16][sum, max, min]
};
HalfOps g_half;

// One outstanding operation: its MPI requests (several when a buffer is sent in int-sized
// chunks) and what completion must still do. Names point into the communicator, which outlives it.
class MpiRequest final : public CommRequest {
 public:
  MpiRequest(const char* operation, const std::string& group)
      : operation_(operation), group_(group) {}
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  ~MpiRequest() override {
    // Only reached with active requests when starting a later chunk failed (CommHandle waits
    // otherwise); MPI cannot cancel a collective, so finish it rather than leave it dangling.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !requests.empty()) {
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    }
  }

  void wait() override {
    const int rc = MPI_Waitall(static_cast<int>(requests.size()), requests.data(), statuses());
    complete(rc, "MPI_Waitall");
  }

  bool test() override {
    int flag = 0;
    const int rc =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, statuses());
    if (rc == MPI_SUCCESS && !flag) return false;
    complete(rc, "MPI_Testall");
    return true;
  }

  std::vector<MPI_Request> requests;
  // recv: the element count each request must deliver, checked on completion.
  std::vector<int> expected_counts;
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;
  int peer = -1;
  int tag = -1;
  // all_to_all: MPI reads the counts and displacements until the operation completes.
  std::vector<int> counts_and_displacements;
  // In-place reduce_scatter: MPI leaves the result at the buffer's start; it belongs at block rank.
  void* move_to = nullptr;
  const void* move_from = nullptr;
  std::size_t move_bytes = 0;

 private:
  MPI_Status* statuses() {
    if (expected_counts.empty()) return MPI_STATUSES_IGNORE;
    status_.resize(requests.size());
    return status_.data();
  }

  void complete(int rc, const char* call) {
    requests.clear();
    if (rc == MPI_ERR_IN_STATUS) {
      for (const MPI_Status& st : status_) {
        if (st.MPI_ERROR != MPI_SUCCESS) rc = st.MPI_ERROR;
      }
    }
    if (rc != MPI_SUCCESS) {
      check_mpi(rc, std::string(call) + " for " + operation_ + " on the " + group_ + " group");
    }
    for (std::size_t i = 0; i < expected_counts.size(); ++i) {
      int got = 0;
      MPI_Get_count(&status_[i], recv_type, &got);
      if (got != expected_counts[i]) {
        throw Error(std::string(operation_) + " from peer " + std::to_string(peer) + " with tag " +
                    std::to_string(tag) + " on the " + group_ + " group: expected " +
                    std::to_string(expected_counts[i]) + " elements, the message held " +
                    std::to_string(got) + " (sender and receiver counts must match)");
      }
    }
    if (move_bytes > 0) std::memmove(move_to, move_from, move_bytes);
  }

  const char* operation_;
  const std::string& group_;
  std::vector<MPI_Status> status_;
};

}  // namespace

void create_mpi_half_ops() {
  if (g_half.created) return;
  check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &g_half.type), "MPI_Type_contiguous");
  check_mpi(MPI_Type_commit(&g_half.type), "MPI_Type_commit");
  MPI_User_function* fns[2][3] = {
      {half_reduce<bf16, ReduceOp::sum>, half_reduce<bf16, ReduceOp::max>,
       half_reduce<bf16, ReduceOp::min>},
      {half_reduce<f16, ReduceOp::sum>, half_reduce<f16, ReduceOp::max>,
       half_reduce<f16, ReduceOp::min>}};
  for (int t = 0; t < 2; ++t) {
    for (int o = 0; o < 3; ++o) {
      check_mpi(MPI_Op_create(fns[t][o], /*commute=*/1, &g_half.ops[t][o]), "MPI_Op_create");
    }
  }
  g_half.created = true;
}

void free_mpi_half_ops() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // MPI already released them
  for (auto& row : g_half.ops) {
    for (MPI_Op& op : row) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
  if (g_half.type != MPI_DATATYPE_NULL) MPI_Type_free(&g_half.type);
  g_half = HalfOps{};
}

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
  // MPI_TAG_UB is attached to MPI_COMM_WORLD only; it holds for every communicator.
  void* tag_ub = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found) == MPI_SUCCESS && found) {
    tag_ub_ = *static_cast<int*>(tag_ub);
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
              std::string(dtype_name(dtype)) + " is not supported by the MPI communicator");
}

std::pair<MPI_Datatype, MPI_Op> MpiCommunicator::reduction(std::string_view operation, DType dtype,
                                                           ReduceOp op) const {
  if (dtype == DType::bf16 || dtype == DType::f16) {
    if (!g_half.created) {
      throw Error(std::string(operation) + " on the " + name_ +
                  " group: " + std::string(dtype_name(dtype)) +
                  " reductions need the MPI ops that MpiRuntime creates after MPI_Init");
    }
    return {g_half.type, g_half.ops[dtype == DType::bf16 ? 0 : 1][static_cast<int>(op)]};
  }
  const MPI_Datatype type = mpi_type(dtype);
  if (type == MPI_DATATYPE_NULL) throw_unsupported(operation, dtype);
  return {type, mpi_op(op)};
}

int MpiCommunicator::block_count(std::string_view operation, std::size_t count) const {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw Error(std::string(operation) + " on the " + name_ + " group: " + std::to_string(count) +
                " elements per rank exceed the MPI limit of " + std::to_string(INT_MAX));
  }
  return static_cast<int>(count);
}

void MpiCommunicator::all_reduce_impl(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  const auto [type, mop] = reduction("all_reduce", dtype, op);
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

CommHandle MpiCommunicator::all_reduce_async_impl(void* buf, std::size_t count, DType dtype,
                                                  ReduceOp op) {
  const auto [type, mop] = reduction("all_reduce_async", dtype, op);
  auto request = std::make_unique<MpiRequest>("all_reduce_async", name_);
  auto* bytes = static_cast<std::uint8_t*>(buf);
  const std::size_t elem = dtype_size(dtype);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    check(MPI_Iallreduce(MPI_IN_PLACE, bytes + done * elem, static_cast<int>(n), type, mop, comm_,
                         &request->requests.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Iallreduce");
    done += n;
  }
  return CommHandle(std::move(request));
}

CommHandle MpiCommunicator::reduce_scatter_impl(const void* send, void* recv,
                                                std::size_t recv_count, DType dtype, ReduceOp op) {
  const auto [type, mop] = reduction("reduce_scatter", dtype, op);
  const int n = block_count("reduce_scatter", recv_count);
  auto request = std::make_unique<MpiRequest>("reduce_scatter", name_);
  const std::size_t block_bytes = recv_count * dtype_size(dtype);
  if (static_cast<const std::uint8_t*>(send) + static_cast<std::size_t>(rank_) * block_bytes ==
      recv) {
    // In place at block rank: MPI reduces within the whole buffer and leaves the result at its
    // start, from where completion moves it to block rank (group rank 0 needs no move).
    void* whole = const_cast<void*>(send);
    check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, whole, n, type, mop, comm_,
                                    &request->requests.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Ireduce_scatter_block");
    if (rank_ != 0) {
      request->move_to = recv;
      request->move_from = whole;
      request->move_bytes = block_bytes;
    }
  } else {
    check(MPI_Ireduce_scatter_block(send, recv, n, type, mop, comm_,
                                    &request->requests.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Ireduce_scatter_block");
  }
  return CommHandle(std::move(request));
}

CommHandle MpiCommunicator::all_gather_impl(const void* send, void* recv, std::size_t send_count,
                                            DType dtype) {
  const MPI_Datatype type = transfer_type(dtype);
  if (type == MPI_DATATYPE_NULL) throw_unsupported("all_gather", dtype);
  const int n = block_count("all_gather", send_count);
  auto request = std::make_unique<MpiRequest>("all_gather", name_);
  const bool in_place = static_cast<const std::uint8_t*>(recv) +
                            static_cast<std::size_t>(rank_) * send_count * dtype_size(dtype) ==
                        send;
  check(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, in_place ? 0 : n,
                       in_place ? MPI_DATATYPE_NULL : type, recv, n, type, comm_,
                       &request->requests.emplace_back(MPI_REQUEST_NULL)),
        "MPI_Iallgather");
  return CommHandle(std::move(request));
}

CommHandle MpiCommunicator::all_to_all_v_impl(const void* send,
                                              const std::vector<std::size_t>& send_counts,
                                              void* recv,
                                              const std::vector<std::size_t>& recv_counts,
                                              DType dtype) {
  const MPI_Datatype type = transfer_type(dtype);
  if (type == MPI_DATATYPE_NULL) throw_unsupported("all_to_all", dtype);
  const auto members = static_cast<std::size_t>(size_);
  auto request = std::make_unique<MpiRequest>("all_to_all", name_);
  // [send counts, send displacements, recv counts, recv displacements], MPI's int each: the
  // displacement past the last block must fit too.
  std::vector<int>& v = request->counts_and_displacements;
  v.assign(4 * members, 0);
  const auto lay_out = [&](const std::vector<std::size_t>& counts, std::size_t at) {
    std::size_t offset = 0;
    for (std::size_t r = 0; r < members; ++r) {
      v[at + r] = block_count("all_to_all", counts[r]);
      v[at + members + r] = block_count("all_to_all", offset);
      offset += counts[r];
    }
    (void)block_count("all_to_all", offset);
  };
  lay_out(send_counts, 0);
  lay_out(recv_counts, 2 * members);
  check(MPI_Ialltoallv(send, v.data(), v.data() + members, type, recv, v.data() + 2 * members,
                       v.data() + 3 * members, type, comm_,
                       &request->requests.emplace_back(MPI_REQUEST_NULL)),
        "MPI_Ialltoallv");
  return CommHandle(std::move(request));
}

CommHandle MpiCommunicator::send_impl(const void* buf, std::size_t count, DType dtype, int peer,
                                      int tag) {
  const MPI_Datatype type = transfer_type(dtype);
  if (type == MPI_DATATYPE_NULL) throw_unsupported("send", dtype);
  if (tag > tag_ub_) {
    throw Error("send on the " + name_ + " group: tag " + std::to_string(tag) +
                " exceeds MPI_TAG_UB (" + std::to_string(tag_ub_) + ")");
  }
  auto request = std::make_unique<MpiRequest>("send", name_);
  const auto* bytes = static_cast<const std::uint8_t*>(buf);
  const std::size_t elem = dtype_size(dtype);
  // Chunks of one (peer, tag) arrive in order (MPI's non-overtaking rule), as recv_impl posts them.
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    check(MPI_Isend(bytes + done * elem, static_cast<int>(n), type, peer, tag, comm_,
                    &request->requests.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Isend");
    done += n;
  }
  return CommHandle(std::move(request));
}

CommHandle MpiCommunicator::recv_impl(void* buf, std::size_t count, DType dtype, int peer,
                                      int tag) {
  const MPI_Datatype type = transfer_type(dtype);
  if (type == MPI_DATATYPE_NULL) throw_unsupported("recv", dtype);
  if (tag > tag_ub_) {
    throw Error("recv on the " + name_ + " group: tag " + std::to_string(tag) +
                " exceeds MPI_TAG_UB (" + std::to_string(tag_ub_) + ")");
  }
  auto request = std::make_unique<MpiRequest>("recv", name_);
  request->recv_type = type;
  request->peer = peer;
  request->tag = tag;
  auto* bytes = static_cast<std::uint8_t*>(buf);
  const std::size_t elem = dtype_size(dtype);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    check(MPI_Irecv(bytes + done * elem, static_cast<int>(n), type, peer, tag, comm_,
                    &request->requests.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Irecv");
    request->expected_counts.push_back(static_cast<int>(n));
    done += n;
  }
  return CommHandle(std::move(request));
}

}  // namespace megatron::detail
