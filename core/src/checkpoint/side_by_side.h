// Two pieces of checkpoint work at once on two of OpenMP's threads (a checksum beside the write
// or the read it goes with).
#pragma once

#include <cstdint>
#include <functional>

namespace megatron::checkpoint::detail {

// Runs main(true) and helper() at once on two threads of OpenMP's pool when two are to be had
// (OpenMP's threads, so a load does not start a thread per tensor: its pool is already running),
// else main(false) alone on this thread. Rethrows the first exception either threw, after both
// have returned. Each must not leave the other waiting when it throws.
void run_side_by_side(const std::function<void(bool together)>& main,
                      const std::function<void()>& helper);

// Whether run_side_by_side would use two threads here (not inside a parallel region, and the
// compute threads setting allows two).
bool side_by_side_possible();

}  // namespace megatron::checkpoint::detail
