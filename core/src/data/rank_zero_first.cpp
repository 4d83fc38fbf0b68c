// Rank 0 builds the dataset caches first; the status broadcast is the barrier.
#include "megatron/data/rank_zero_first.h"

#include <array>
#include <exception>

#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::data {

void build_rank_zero_first(ParallelState& parallel, const std::function<void()>& build) {
  if (parallel.world_size() == 1) {
    build();
    return;
  }
  const bool first = parallel.world_rank() == 0;
  std::exception_ptr failure;
  if (first) {
    try {
      build();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  std::array<std::int64_t, 1> status = {failure ? 1 : 0};
  parallel.comm(Group::world).broadcast(status, 0);
  if (failure) std::rethrow_exception(failure);
  if (status[0] != 0) {
    throw Error("rank 0 could not build the dataset index caches (its error message says why)");
  }
  if (!first) build();
}

}  // namespace megatron::data
