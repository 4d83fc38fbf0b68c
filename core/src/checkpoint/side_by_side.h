// Two pieces of checkpoint work at once on two of OpenMP's threads (a checksum beside the read or
// the write it goes with), and the count one of them raises while the other waits on it.
#pragma once

#include <atomic>
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

// A count that one thread raises and another waits on, which can also be ended (no more coming).
// Waiting spins briefly (a window's transfer takes tens of microseconds) and then sleeps.
class Progress {
 public:
  // Publishes everything written before it as done up to count `n` (the count never falls).
  void advance_to(std::uint32_t n);
  // No more will come: waits for counts beyond the current one return false.
  void end();
  // Waits until the count exceeds `n` (true), or returns false once it ended at or below `n`.
  bool wait_past(std::uint32_t n) const;

 private:
  // count << 1 | ended: 32 bits so waiting is a futex on Linux; a count is of 256 KiB windows.
  std::atomic<std::uint32_t> state_{0};
};

}  // namespace megatron::checkpoint::detail
