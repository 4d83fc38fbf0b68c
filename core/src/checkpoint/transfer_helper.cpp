// The second thread of a checkpoint load or save.
#include "checkpoint/transfer_helper.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <string>
#include <utility>

namespace megatron::checkpoint::detail {

namespace {

// Spins until ready() or for kSpin, whichever comes first: the threads of a load wait for each
// other for a few microseconds at each tensor, less than a sleep and its wake-up take, and a
// bounded spin keeps an idle helper off the core (OpenMP's pool, spinning for milliseconds,
// took 19% of a load's samples).
constexpr std::chrono::microseconds kSpin{50};

template <typename Ready>
void spin_until(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (unsigned k = 1; !ready(); ++k) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (k % 64 == 0 && std::chrono::steady_clock::now() > until) return;
  }
}

}  // namespace

// A plain thread rather than one of OpenMP's: it sleeps on a condition variable between
// tensors, where an OpenMP region per tensor left OpenMP's pool spinning after each one (19% of
// a warm load's samples in perf, bench/RESULTS.md).
TransferHelper::TransferHelper() {
  if (omp_in_parallel() || omp_get_max_threads() < 2) return;
  owner_ = ::getpid();
  helper_ = std::thread([this] {
    // Woken for each tensor, the helper would otherwise preempt the thread that woke it, on the
    // core the scheduler put it on beside that thread: the loading thread then waited ~250 us a
    // tensor before its next read (1.4 ms of a cold 96 MiB load, 4% of it; `perf sched` would show
    // it as wake-up preemption). SCHED_BATCH is the ordinary policy without that preemption; any
    // thread may take it. Refused (a seccomp filter), the helper runs as before.
    const sched_param batch{};
    ::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &batch);
    run();
  });
}

TransferHelper::~TransferHelper() {
  ring_.reset();  // waits for the reads still under way (a load that threw keeps their memory)
  if (!helper_.joinable()) return;
  if (::getpid() != owner_) {  // a fork's child: the thread is its parent's
    helper_.detach();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  helper_.join();
}

bool TransferHelper::active() const {
  return helper_.joinable() && ::getpid() == owner_;
}

std::uint64_t TransferHelper::queue(std::function<void()> job) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    ticket = ++queued_;
  }
  changed_.notify_all();
  return ticket;
}

void TransferHelper::run_on_both(const std::function<void(int)>& task) {
  if (!active()) {
    task(0);
    return;
  }
  // Whoever comes first claims the helper's part: the helper to run it, or this thread, done with
  // its own part, to drop it (the helper is still on work deferred before, and waiting for it
  // would leave the disk idle: a cold load's paired reads waited ~2 ms a layer so).
  enum Claim : int { unclaimed, running, dropped };
  auto claim = std::make_shared<std::atomic<int>>(unclaimed);
  std::exception_ptr helper;  // written by the helper before done_ reaches the ticket
  const std::uint64_t ticket = queue([claim, &task, &helper] {
    int expected = unclaimed;
    if (!claim->compare_exchange_strong(expected, running)) return;  // the caller went on
    try {
      task(1);
    } catch (...) {
      helper = std::current_exception();
    }
  });
  std::exception_ptr own;
  try {
    task(0);
  } catch (...) {
    own = std::current_exception();
  }
  int expected = unclaimed;
  if (!claim->compare_exchange_strong(expected, dropped)) {
    // The helper's part reads this frame: wait for it however this thread's part ended. It is
    // usually one window from its end: spun for first (a sleep's wake-up took ~35 us a tensor).
    spin_until([&] { return done_.load(std::memory_order_acquire) >= ticket; });
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return done_ >= ticket; });
  }
  if (own) std::rethrow_exception(own);
  if (helper) std::rethrow_exception(helper);
}

void TransferHelper::defer(std::shared_ptr<SharedWork> check) {
  if (!active()) {
    check->take_part(0);
  } else {
    queue([check] { check->take_part(1); });
  }
  std::lock_guard lock(mutex_);
  deferred_.push_back(std::move(check));
}

void TransferHelper::defer_behind(std::shared_ptr<SharedWork> work) {
  std::shared_ptr<SharedWork> previous = std::exchange(behind_, work);
  {
    std::lock_guard lock(mutex_);
    deferred_.push_back(std::move(work));
  }
  if (previous) previous->take_part(0);
}

RingReads* TransferHelper::ring() {
  if (!ring_opened_) {
    ring_opened_ = true;
    ring_ = RingReads::open();
  }
  return ring_.get();
}

std::string TransferHelper::finish() {
  if (behind_) std::exchange(behind_, nullptr)->take_part(0);
  std::unique_lock lock(mutex_);
  const std::deque<std::shared_ptr<SharedWork>> checks = std::exchange(deferred_, {});
  lock.unlock();
  // The helper may still be on the first of them; this thread takes what is left of each (the
  // last tensor's sums would otherwise all fall on the helper while the load waits).
  if (active()) {
    for (const std::shared_ptr<SharedWork>& check : checks)
      check->take_part(0);
    lock.lock();
    changed_.wait(lock, [&] { return done_ == queued_; });
    lock.unlock();
  }
  for (const std::shared_ptr<SharedWork>& check : checks)
    if (std::string damage = check->verdict(); !damage.empty()) return damage;
  return "";
}

void TransferHelper::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (jobs_.empty() && !stop_) {
      // The next tensor's job usually comes within microseconds (its metadata read): spun for
      // before sleeping.
      lock.unlock();
      spin_until([&] { return queued_.load(std::memory_order_acquire) != done_.load(); });
      lock.lock();
    }
    changed_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    // The job stays queued while it runs; it is only ever read here.
    const std::function<void()>& job = jobs_.front();
    lock.unlock();
    job();
    lock.lock();
    jobs_.pop_front();
    ++done_;
    changed_.notify_all();
  }
}

}  // namespace megatron::checkpoint::detail
