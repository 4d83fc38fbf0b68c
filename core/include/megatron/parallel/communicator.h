// Collective operations over one process group, independent of the transport (MPI, single process).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "megatron/dtype.h"

namespace megatron {

enum class ReduceOp : std::uint8_t { sum, max, min };

// Element types a communicator can carry: those with a DType (see dtype_of in dtype.h).
template <typename T>
concept CommElement = requires {
  dtype_of<std::remove_cv_t<T>>::value;
};

// The progress of one started operation, implemented by each transport. CommHandle owns one.
class CommRequest {
 public:
  virtual ~CommRequest();
  // Blocks until the operation is complete; throws megatron::Error on a transport failure.
  virtual void wait() = 0;
  // Returns true once complete, without blocking; also drives the transport's progress.
  virtual bool test() = 0;

 protected:
  CommRequest() = default;
};

// Move-only handle of an asynchronous operation. Default-constructed = already complete.
// Until the handle reports completion (wait() returned, or test() returned true) the operation
// still reads or writes the caller's buffers, so they must stay alive and untouched. The destructor
// waits if wait() was never called (never leaves MPI requests dangling); errors it meets there are
// logged, since a destructor cannot throw. A handle must not outlive its communicator.
class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::unique_ptr<CommRequest> request) : request_(std::move(request)) {}
  CommHandle(CommHandle&&) noexcept = default;
  // Waits for the operation this handle held before taking the other one.
  CommHandle& operator=(CommHandle&& other);
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle();

  // Blocks until complete. Calling it again, or on a completed handle, returns at once.
  void wait();
  // True once complete; each call lets the transport make progress (MPI_Test, cudaEventQuery).
  bool test();
  // True when wait() or test() already saw completion (does not poll the transport).
  bool completed() const { return request_ == nullptr; }

 private:
  std::unique_ptr<CommRequest> request_;
};

// One process group. Every member must call each collective in the same order with matching
// count, dtype, op and root; like MPI, a mismatch is undefined (usually a hang). Point-to-point
// send/recv pairs match by (peer, tag) and, within one (peer, tag), in the order they were started.
//
// The public operations validate their arguments once here and forward to the protected *_impl
// hooks, so the typed overloads below never get hidden by an implementation's overrides. Error
// messages name the operation, the group and what is wrong. A count of 0 does nothing (no
// synchronization, no message).
//
// Asynchronous forms start the operation and return a CommHandle; the blocking forms are the same
// operation followed by wait(). Overlap comes from starting operations, computing, and calling
// test() or wait() from the same thread: nothing progresses in the background on its own unless
// the transport does so (NCCL runs on its stream; MPI progresses inside MPI calls).
//
// Thread safety: a Communicator is used by one thread at a time (the runtime asks MPI only for
// MPI_THREAD_FUNNELED). Ownership: ParallelState owns the group communicators it hands out by
// reference; they live as long as that ParallelState.
class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This process's index in the group, in [0, size()).
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's members as world ranks, indexed by group rank.
  virtual const std::vector<int>& global_ranks() const = 0;
  // The group's name for messages ("tensor", "data", ...).
  virtual const std::string& name() const = 0;

  // In-place reduction of `count` elements of `dtype` at `buf` across the group; every member ends
  // with the result. A count of 0 does nothing (and does not synchronize). Throws megatron::Error
  // naming the operation on bad arguments, an unsupported dtype, or a transport failure.
  void all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op);
  // Copies `count` elements at `buf` on group rank `root` into `buf` on every other member.
  void broadcast(void* buf, std::size_t count, DType dtype, int root);
  // Returns once every member has entered the barrier.
  void barrier();
  // send holds size()*recv_count elements; group rank r receives the `op` reduction of block r.
  // recv must not overlap send, except exactly at send + rank()*recv_count (in place, as NCCL);
  // in place, the other blocks of send hold unspecified values afterwards.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                      ReduceOp op);
  // recv receives size()*send_count elements, block r from group rank r. `send` may alias
  // recv + rank()*send_count (in place); no other overlap is allowed.
  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype);
  // Block exchange (MoE's token dispatch): send holds size() consecutive blocks, block r of
  // send_counts[r] elements going to group rank r; recv receives size() consecutive blocks, block
  // q of recv_counts[q] elements from group rank q. Counts may be uneven and zero but must agree
  // pairwise (rank p's send_counts[q] == rank q's recv_counts[p]); every member calls it, even with
  // nothing to send or receive. send and recv must not overlap.
  void all_to_all_v(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                    const std::vector<std::size_t>& recv_counts, DType dtype);
  // Equal blocks of `count` elements each way.
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype);
  // Point-to-point with group rank `peer` (for pipeline stages); matching by (peer, tag). The peer
  // must be another member (never this rank) and tag must be >= 0. The receiver's count must equal
  // the sender's.
  void send(const void* buf, std::size_t count, DType dtype, int peer, int tag = 0);
  void recv(void* buf, std::size_t count, DType dtype, int peer, int tag = 0);

  // The same operations, started and returned as a handle (see CommHandle for buffer lifetime).
  CommHandle all_reduce_async(void* buf, std::size_t count, DType dtype, ReduceOp op);
  CommHandle reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                  ReduceOp op);
  CommHandle all_gather_async(const void* send, void* recv, std::size_t send_count, DType dtype);
  CommHandle all_to_all_v_async(const void* send, const std::vector<std::size_t>& send_counts,
                                void* recv, const std::vector<std::size_t>& recv_counts,
                                DType dtype);
  CommHandle send_async(const void* buf, std::size_t count, DType dtype, int peer, int tag = 0);
  CommHandle recv_async(void* buf, std::size_t count, DType dtype, int peer, int tag = 0);

  // Typed conveniences: any contiguous range of float, double, int32, int64 or uint8
  // (std::vector, std::array, std::span, ...), e.g. comm.all_reduce(grads, ReduceOp::sum).
  template <typename R>
  requires std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
      CommElement<std::ranges::range_value_t<R>>
  void all_reduce(R&& data, ReduceOp op = ReduceOp::sum) {
    using T = std::remove_reference_t<std::ranges::range_reference_t<R>>;
    static_assert(!std::is_const_v<T>, "all_reduce works in place; pass a mutable range");
    all_reduce(static_cast<void*>(std::ranges::data(data)), std::ranges::size(data), dtype_of_v<T>,
               op);
  }
  template <typename R>
  requires std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
      CommElement<std::ranges::range_value_t<R>>
  void broadcast(R&& data, int root) {
    using T = std::remove_reference_t<std::ranges::range_reference_t<R>>;
    static_assert(!std::is_const_v<T>, "broadcast writes into the range; pass a mutable range");
    broadcast(static_cast<void*>(std::ranges::data(data)), std::ranges::size(data), dtype_of_v<T>,
              root);
  }
  // Reduces one value and returns the result, e.g. the global loss sum.
  template <CommElement T>
  T all_reduce_value(T value, ReduceOp op = ReduceOp::sum) {
    all_reduce(static_cast<void*>(&value), 1, dtype_of_v<T>, op);
    return value;
  }

 protected:
  Communicator() = default;

  // Called with validated arguments: count > 0, non-null buffers, a known dtype and op,
  // 0 <= root < size(), peer another member, tag >= 0, and for reduce_scatter/all_gather recv
  // either disjoint from send or aliased exactly as documented above.
  virtual void all_reduce_impl(void* buf, std::size_t count, DType dtype, ReduceOp op) = 0;
  virtual void broadcast_impl(void* buf, std::size_t count, DType dtype, int root) = 0;
  virtual void barrier_impl() = 0;
  // These start the operation; the blocking public forms wait on the returned handle.
  virtual CommHandle all_reduce_async_impl(void* buf, std::size_t count, DType dtype,
                                           ReduceOp op) = 0;
  virtual CommHandle reduce_scatter_impl(const void* send, void* recv, std::size_t recv_count,
                                         DType dtype, ReduceOp op) = 0;
  virtual CommHandle all_gather_impl(const void* send, void* recv, std::size_t send_count,
                                     DType dtype) = 0;
  // Counts checked: size() of each, some non-zero element on this rank or not, buffers non-null
  // where their total is non-zero and disjoint.
  virtual CommHandle all_to_all_v_impl(const void* send,
                                       const std::vector<std::size_t>& send_counts, void* recv,
                                       const std::vector<std::size_t>& recv_counts,
                                       DType dtype) = 0;
  virtual CommHandle send_impl(const void* buf, std::size_t count, DType dtype, int peer,
                               int tag) = 0;
  virtual CommHandle recv_impl(void* buf, std::size_t count, DType dtype, int peer, int tag) = 0;
};

// A group of one: this process alone, with world rank `global_rank`. All-reduce and broadcast are
// no-ops, since a reduction or broadcast over a single member leaves the buffer as it is;
// reduce_scatter, all_gather and all_to_all copy send to recv; send/recv throw (there is no peer).
// Everything completes before returning, so its handles are already complete. Used when the program
// was not started by an MPI launcher, and for groups of one.
std::unique_ptr<Communicator> make_self_communicator(int global_rank = 0,
                                                     std::string name = "self");

constexpr const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

}  // namespace megatron
