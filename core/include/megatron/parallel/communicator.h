// Collective operations over one process group, independent of the transport (MPI, single process).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ranges>
#include <type_traits>
#include <vector>

#include "megatron/dtype.h"

namespace megatron {

enum class ReduceOp : std::uint8_t { sum, max, min };

// Element types a communicator can carry: those with a DType (see dtype_of in dtype.h).
template <typename T>
concept CommElement = requires {
  dtype_of<std::remove_cv_t<T>>::value;
};

// One process group. Every member must call each collective in the same order with matching
// count, dtype, op and root; like MPI, a mismatch is undefined (usually a hang).
//
// The public collectives validate their arguments once here and forward to the protected
// *_impl hooks, so the typed overloads below never get hidden by an implementation's overrides.
// Future operations (reduce_scatter, all_gather, send/recv, async handles) are added the same way.
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

  // In-place reduction of `count` elements of `dtype` at `buf` across the group; every member ends
  // with the result. A count of 0 does nothing (and does not synchronize). Throws megatron::Error
  // naming the operation on bad arguments, an unsupported dtype, or a transport failure.
  void all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op);
  // Copies `count` elements at `buf` on group rank `root` into `buf` on every other member.
  void broadcast(void* buf, std::size_t count, DType dtype, int root);
  // Returns once every member has entered the barrier.
  void barrier();

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

  // Called with validated arguments: count > 0, buf non-null, 0 <= root < size(), a known op.
  virtual void all_reduce_impl(void* buf, std::size_t count, DType dtype, ReduceOp op) = 0;
  virtual void broadcast_impl(void* buf, std::size_t count, DType dtype, int root) = 0;
  virtual void barrier_impl() = 0;
};

// A group of one: this process alone, with world rank `global_rank`. Collectives are no-ops, since
// a reduction or broadcast over a single member leaves the buffer as it is. Used when the program
// was not started by an MPI launcher.
std::unique_ptr<Communicator> make_self_communicator(int global_rank = 0);

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
