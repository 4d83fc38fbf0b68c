// Checkpoint work split over two of OpenMP's threads.
#include "checkpoint/side_by_side.h"

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <exception>

namespace megatron::checkpoint::detail {

namespace {

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

}  // namespace megatron::checkpoint::detail
