// A helper thread for one checkpoint load that checks tensors behind the reads of the loading
// thread, so the sums of one tensor overlap the read of the next (Note [Mapped reads]).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace megatron::checkpoint::detail {

class TrailingSums {
 public:
  // What a queued check is told: whether the read of its tensor is over (every page it sums is
  // then in the page cache, or the read failed), and whether the load gave up (its verdict is no
  // longer wanted).
  struct Signals {
    const std::atomic<bool>& read_done;
    const std::atomic<bool>& stop;
  };
  // A check: "" or the damage it found ("tensor '<name>' is damaged: ...").
  using Check = std::function<std::string(const Signals&)>;
  // Set by the loading thread once the read a check trails has finished, failed or thrown.
  using ReadDone = std::shared_ptr<std::atomic<bool>>;

  // Starts the helper thread when two compute threads are allowed here (the compute threads
  // setting, and not inside a parallel region); otherwise active() is false and nothing is queued.
  TrailingSums();
  // Gives up on the checks not done yet, and joins the helper.
  ~TrailingSums();
  TrailingSums(const TrailingSums&) = delete;
  TrailingSums& operator=(const TrailingSums&) = delete;

  // Whether checks can be queued: the helper runs, in this process (not a fork's child).
  bool active() const;
  // Queues a check, first waiting while kMaxPending are queued or running (each holds a mapping
  // of its tensor); the caller sets the returned flag once its read is over, however it ended.
  ReadDone add(Check check);
  // Waits for every queued check; the first damage in the order they were queued, or "".
  std::string finish();

  // How many checks may be queued or running at once.
  static constexpr std::size_t kMaxPending = 4;

 private:
  struct Job {
    Check check;
    ReadDone read_done;
  };
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> pending_;   // queued, and the running one at the front
  std::string first_damage_;  // of the checks done since the last finish()
  std::atomic<bool> stop_{false};
  pid_t owner_ = 0;
  std::thread helper_;
};

}  // namespace megatron::checkpoint::detail
