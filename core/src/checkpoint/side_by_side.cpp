// Checkpoint work split over two of OpenMP's threads, and the count they hand windows over with.
#include "checkpoint/side_by_side.h"

#include <omp.h>
#include <pthread.h>

#include <exception>
#include <thread>

namespace megatron::checkpoint::detail {

namespace {

// Spins before sleeping: about a window's transfer at a pause's ~40 cycles.
constexpr int kSpins = 2048;

void pause() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Whether this process is a fork of one that may have started OpenMP's pool: GNU OpenMP's pool
// does not survive fork(), and a parallel region in the child waits forever for its threads (a
// test's child saving checkpoints did). Such a child does the work on one thread.
std::atomic<bool> forked{false};
const int fork_watch = pthread_atfork(nullptr, nullptr, [] { forked.store(true); });

}  // namespace

bool side_by_side_possible() {
  return fork_watch == 0 && !forked.load() && !omp_in_parallel() && omp_get_max_threads() >= 2;
}

void run_side_by_side(const std::function<void(bool together)>& main,
                      const std::function<void()>& helper) {
  if (!side_by_side_possible()) {
    main(false);
    return;
  }
  std::exception_ptr main_failure, helper_failure;
#pragma omp parallel num_threads(2)
  {
    // Both threads see the same team size; with one thread (OpenMP may give fewer), main alone.
    const bool together = omp_get_num_threads() == 2;
    if (omp_get_thread_num() == 0) {
      try {
        main(together);
      } catch (...) {
        main_failure = std::current_exception();
      }
    } else {
      try {
        helper();
      } catch (...) {
        helper_failure = std::current_exception();
      }
    }
  }
  if (main_failure) std::rethrow_exception(main_failure);
  if (helper_failure) std::rethrow_exception(helper_failure);
}

void Progress::advance_to(std::uint32_t n) {
  state_.store(n << 1, std::memory_order_release);
  state_.notify_one();
}

void Progress::end() {
  state_.fetch_or(1u, std::memory_order_acq_rel);
  state_.notify_all();
}

bool Progress::wait_past(std::uint32_t n) const {
  for (int spin = 0;; ++spin) {
    const std::uint32_t state = state_.load(std::memory_order_acquire);
    if ((state >> 1) > n) return true;
    if (state & 1u) return false;
    if (spin < kSpins) {
      pause();
    } else {
      state_.wait(state, std::memory_order_acquire);
    }
  }
}

}  // namespace megatron::checkpoint::detail
