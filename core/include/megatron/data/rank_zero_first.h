// Megatron's order for building dataset index caches in a multi-rank job: global rank 0 builds
// (and writes the caches), then every other rank loads them.
#pragma once

#include <functional>

namespace megatron {
class ParallelState;
}

namespace megatron::data {

// Runs `build` on world rank 0, then, after it succeeded, on every other rank. A failure on rank
// 0 is rethrown there and reported on the others (none waits forever).
void build_rank_zero_first(ParallelState& parallel, const std::function<void()>& build);

}  // namespace megatron::data
