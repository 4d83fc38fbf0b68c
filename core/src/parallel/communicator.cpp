// Argument checks shared by every Communicator implementation, done once before dispatch, and the
// transport-independent CommHandle.
#include "megatron/parallel/communicator.h"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <exception>
#include <string>

#include "megatron/error.h"

namespace megatron {
namespace {

// "<op> on the <group> group: "
std::string where(const char* op, const Communicator& comm) {
  return std::string(op) + " on the " + comm.name() + " group: ";
}

void check_dtype(const char* op, const Communicator& comm, DType dtype) {
  if (dtype_size(dtype) == 0) {
    throw Error(where(op, comm) + "unknown dtype value " + std::to_string(static_cast<int>(dtype)));
  }
}

void check_buffer(const char* op, const Communicator& comm, const char* which, const void* buf,
                  std::size_t count) {
  if (buf == nullptr) {
    throw Error(where(op, comm) + which + " buffer is null but count is " + std::to_string(count));
  }
}

void check_op(const char* op, const Communicator& comm, ReduceOp rop) {
  if (rop != ReduceOp::sum && rop != ReduceOp::max && rop != ReduceOp::min) {
    throw Error(where(op, comm) + "unknown reduce op value " +
                std::to_string(static_cast<int>(rop)));
  }
}

void check_peer(const char* op, const Communicator& comm, int peer, int tag) {
  if (peer < 0 || peer >= comm.size()) {
    throw Error(where(op, comm) + "peer " + std::to_string(peer) +
                " is outside the group of size " + std::to_string(comm.size()) + " (expected 0.." +
                std::to_string(comm.size() - 1) + ")");
  }
  if (peer == comm.rank()) {
    throw Error(where(op, comm) + "peer " + std::to_string(peer) + " is this rank itself" +
                (comm.size() == 1 ? " (a group of one has no other member)" : ""));
  }
  if (tag < 0) throw Error(where(op, comm) + "tag " + std::to_string(tag) + " is negative");
}

// `small` (the per-rank block) must be disjoint from `big` (all blocks) or sit exactly at block
// rank(): the in-place form every transport supports.
void check_overlap(const char* op, const Communicator& comm, const void* big, const void* small,
                   std::size_t block_count, DType dtype) {
  const std::size_t elem = dtype_size(dtype);
  const std::size_t block_bytes = block_count * elem;
  const std::size_t big_bytes = block_bytes * static_cast<std::size_t>(comm.size());
  const auto b = reinterpret_cast<std::uintptr_t>(big);
  const auto s = reinterpret_cast<std::uintptr_t>(small);
  if (s + block_bytes <= b || b + big_bytes <= s) return;
  if (s == b + static_cast<std::size_t>(comm.rank()) * block_bytes) return;
  throw Error(where(op, comm) +
              "the send and recv buffers overlap; the rank's block may only alias "
              "the full buffer at block rank() (" +
              std::to_string(comm.rank()) + ")");
}

}  // namespace

CommRequest::~CommRequest() = default;

CommHandle& CommHandle::operator=(CommHandle&& other) {
  if (this != &other) {
    wait();
    request_ = std::move(other.request_);
  }
  return *this;
}

CommHandle::~CommHandle() {
  if (request_ == nullptr) return;
  try {
    wait();
  } catch (const std::exception& e) {
    spdlog::error("communication handle destroyed while its operation failed: {}", e.what());
  }
}

void CommHandle::wait() {
  if (request_ == nullptr) return;
  // Released before waiting, so a failed request is not waited on again by the destructor.
  const std::unique_ptr<CommRequest> request = std::move(request_);
  request->wait();
}

bool CommHandle::test() {
  if (request_ == nullptr) return true;
  bool done = false;
  try {
    done = request_->test();
  } catch (...) {
    request_.reset();
    throw;
  }
  if (done) request_.reset();
  return done;
}

Communicator::~Communicator() = default;

void Communicator::all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  check_dtype("all_reduce", *this, dtype);
  check_op("all_reduce", *this, op);
  if (count == 0) return;
  check_buffer("all_reduce", *this, "the", buf, count);
  all_reduce_impl(buf, count, dtype, op);
}

void Communicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  if (root < 0 || root >= size()) {
    throw Error(where("broadcast", *this) + "root " + std::to_string(root) +
                " is outside the group of size " + std::to_string(size()) + " (expected 0.." +
                std::to_string(size() - 1) + ")");
  }
  check_dtype("broadcast", *this, dtype);
  if (count == 0) return;
  check_buffer("broadcast", *this, "the", buf, count);
  broadcast_impl(buf, count, dtype, root);
}

void Communicator::barrier() {
  barrier_impl();
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                  ReduceOp op) {
  reduce_scatter_async(send, recv, recv_count, dtype, op).wait();
}

void Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DType dtype) {
  all_gather_async(send, recv, send_count, dtype).wait();
}

void Communicator::send(const void* buf, std::size_t count, DType dtype, int peer, int tag) {
  send_async(buf, count, dtype, peer, tag).wait();
}

void Communicator::recv(void* buf, std::size_t count, DType dtype, int peer, int tag) {
  recv_async(buf, count, dtype, peer, tag).wait();
}

CommHandle Communicator::all_reduce_async(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  check_dtype("all_reduce_async", *this, dtype);
  check_op("all_reduce_async", *this, op);
  if (count == 0) return {};
  check_buffer("all_reduce_async", *this, "the", buf, count);
  return all_reduce_async_impl(buf, count, dtype, op);
}

CommHandle Communicator::reduce_scatter_async(const void* send, void* recv, std::size_t recv_count,
                                              DType dtype, ReduceOp op) {
  check_dtype("reduce_scatter", *this, dtype);
  check_op("reduce_scatter", *this, op);
  if (recv_count == 0) return {};
  check_buffer("reduce_scatter", *this, "the send", send, recv_count);
  check_buffer("reduce_scatter", *this, "the recv", recv, recv_count);
  check_overlap("reduce_scatter", *this, send, recv, recv_count, dtype);
  return reduce_scatter_impl(send, recv, recv_count, dtype, op);
}

CommHandle Communicator::all_gather_async(const void* send, void* recv, std::size_t send_count,
                                          DType dtype) {
  check_dtype("all_gather", *this, dtype);
  if (send_count == 0) return {};
  check_buffer("all_gather", *this, "the send", send, send_count);
  check_buffer("all_gather", *this, "the recv", recv, send_count);
  check_overlap("all_gather", *this, recv, send, send_count, dtype);
  return all_gather_impl(send, recv, send_count, dtype);
}

void Communicator::all_to_all_v(const void* send, const std::vector<std::size_t>& send_counts,
                                void* recv, const std::vector<std::size_t>& recv_counts,
                                DType dtype) {
  all_to_all_v_async(send, send_counts, recv, recv_counts, dtype).wait();
}

void Communicator::all_to_all(const void* send, void* recv, std::size_t count, DType dtype) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), count);
  all_to_all_v(send, counts, recv, counts, dtype);
}

CommHandle Communicator::all_to_all_v_async(const void* send,
                                            const std::vector<std::size_t>& send_counts, void* recv,
                                            const std::vector<std::size_t>& recv_counts,
                                            DType dtype) {
  const char* op = "all_to_all";
  check_dtype(op, *this, dtype);
  const auto members = static_cast<std::size_t>(size());
  if (send_counts.size() != members || recv_counts.size() != members) {
    throw Error(where(op, *this) + std::to_string(send_counts.size()) + " send and " +
                std::to_string(recv_counts.size()) + " recv counts for a group of " +
                std::to_string(members));
  }
  std::size_t sent = 0, received = 0;
  for (std::size_t r = 0; r < members; ++r) {
    sent += send_counts[r];
    received += recv_counts[r];
  }
  if (sent > 0) check_buffer(op, *this, "the send", send, sent);
  if (received > 0) check_buffer(op, *this, "the recv", recv, received);
  const std::size_t elem = dtype_size(dtype);
  const auto s = reinterpret_cast<std::uintptr_t>(send);
  const auto r = reinterpret_cast<std::uintptr_t>(recv);
  if (sent > 0 && received > 0 && s < r + received * elem && r < s + sent * elem) {
    throw Error(where(op, *this) + "the send and recv buffers overlap");
  }
  return all_to_all_v_impl(send, send_counts, recv, recv_counts, dtype);
}

CommHandle Communicator::send_async(const void* buf, std::size_t count, DType dtype, int peer,
                                    int tag) {
  check_dtype("send", *this, dtype);
  check_peer("send", *this, peer, tag);
  if (count == 0) return {};
  check_buffer("send", *this, "the", buf, count);
  return send_impl(buf, count, dtype, peer, tag);
}

CommHandle Communicator::recv_async(void* buf, std::size_t count, DType dtype, int peer, int tag) {
  check_dtype("recv", *this, dtype);
  check_peer("recv", *this, peer, tag);
  if (count == 0) return {};
  check_buffer("recv", *this, "the", buf, count);
  return recv_impl(buf, count, dtype, peer, tag);
}

}  // namespace megatron
