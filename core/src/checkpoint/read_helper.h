// A second thread for one checkpoint load, which reads and checks whole tensors together with the
// loading thread (Note [Paired reads] in tile_digests.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace megatron::checkpoint::detail {

// A check deferred to the helper that the loading thread can join once it has nothing else to
// do (in ReadHelper::finish): each thread calls take_part with its own worker number (the loading
// thread 0, the helper 1) and does what is left of the work; verdict() once both have returned.
class SharedCheck {
 public:
  virtual ~SharedCheck() = default;
  virtual void take_part(int worker) noexcept = 0;
  // "" or the damage found ("tensor '<name>' is damaged: ...").
  virtual std::string verdict() = 0;
};

class ReadHelper {
 public:
  // Starts the helper thread when two compute threads are allowed here (the compute threads
  // setting, and not inside a parallel region); otherwise active() is false.
  ReadHelper();
  // Drops the deferred checks not started and joins the helper (in a fork's child, where it does
  // not run, leaves it).
  ~ReadHelper();
  ReadHelper(const ReadHelper&) = delete;
  ReadHelper& operator=(const ReadHelper&) = delete;

  // Whether the helper runs, in this process (fork copies only the calling thread).
  bool active() const;
  // Calls task(0) on the calling thread and task(1) on the helper (once the checks deferred
  // before have run), and returns once both have returned; an exception either threw is rethrown
  // here (the calling thread's first). Without the helper, calls task(0) only.
  void run_on_both(const std::function<void(int worker)>& task);
  // Runs `check` on the helper after what was queued before it (without the helper: here, now);
  // finish() gives its verdict. What it reads must stay valid until then.
  void defer(std::shared_ptr<SharedCheck> check);
  // Takes part in the deferred checks not done yet and waits for them: the first damage among
  // them in the order they were deferred, or "".
  std::string finish();

 private:
  void run();
  // Queues a job and returns its ticket: the job is done once done_ reaches it.
  std::uint64_t queue(std::function<void()> job);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;  // queued, the running one at the front
  // Jobs ever queued, and done (in order): changed under the mutex, read by spins without it.
  std::atomic<std::uint64_t> queued_{0}, done_{0};
  std::deque<std::shared_ptr<SharedCheck>> deferred_;  // since the last finish(), in order
  bool stop_ = false;
  pid_t owner_ = 0;
  std::thread helper_;
};

}  // namespace megatron::checkpoint::detail
