// Checks trailing a checkpoint load's reads on a helper thread.
#include "checkpoint/trailing_sums.h"

#include <omp.h>
#include <unistd.h>

#include <exception>
#include <utility>

namespace megatron::checkpoint::detail {

// A plain thread rather than one of OpenMP's: it sleeps on a condition variable between
// tensors, where an OpenMP region per tensor left its pool spinning (19% of a warm load's
// samples in perf) and made every tensor wait for its own sums' tail.
TrailingSums::TrailingSums() {
  if (omp_in_parallel() || omp_get_max_threads() < 2) return;
  owner_ = ::getpid();
  helper_ = std::thread([this] { run(); });
}

TrailingSums::~TrailingSums() {
  if (!helper_.joinable()) return;
  if (::getpid() != owner_) {  // a fork's child: the helper is its parent's, not to be joined
    helper_.detach();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  changed_.notify_all();
  helper_.join();
}

bool TrailingSums::active() const {
  // A fork's child has no helper thread (fork copies only the calling thread).
  return helper_.joinable() && ::getpid() == owner_;
}

TrailingSums::ReadDone TrailingSums::add(Check check) {
  auto read_done = std::make_shared<std::atomic<bool>>(false);
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return pending_.size() < kMaxPending; });
  pending_.push_back({std::move(check), read_done});
  lock.unlock();
  changed_.notify_all();
  return read_done;
}

std::string TrailingSums::finish() {
  std::unique_lock lock(mutex_);
  if (!active()) return std::exchange(first_damage_, "");  // nothing runs the checks queued
  changed_.wait(lock, [&] { return pending_.empty(); });
  return std::exchange(first_damage_, "");
}

void TrailingSums::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return !pending_.empty() || stop_.load(); });
    if (stop_.load()) return;
    // The job stays at the front while it runs, so add() counts it against kMaxPending.
    const Job& job = pending_.front();
    lock.unlock();
    std::string damage;
    try {
      damage = job.check(Signals{*job.read_done, stop_});
    } catch (const std::exception& e) {
      damage = e.what();
    }
    lock.lock();
    if (first_damage_.empty()) first_damage_ = std::move(damage);
    pending_.pop_front();
    changed_.notify_all();
  }
}

}  // namespace megatron::checkpoint::detail
