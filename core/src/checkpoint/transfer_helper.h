// A second thread for one checkpoint load or save: it reads and checks whole tensors together
// with the loading thread (Note [Paired reads] in tile_digests.h) and sums the tensors a save
// writes while the saving thread writes them (Note [Summed beside the writes]). A load also asks
// it which tensors are in the page cache, which decides how the two threads read them, and, with
// one compute thread, takes its io_uring ring from it (Note [Ring reads]).
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

#include "checkpoint/page_cache.h"
#include "checkpoint/ring_reads.h"

namespace megatron::checkpoint::detail {

// Work deferred to the helper (a load's check, a save's sums) that the calling thread can join
// once it has nothing else to do (in TransferHelper::finish): each thread calls take_part with its
// own worker number (the calling thread 0, the helper 1) and does what is left of the work;
// verdict() once both have returned.
class SharedWork {
 public:
  virtual ~SharedWork() = default;
  virtual void take_part(int worker) noexcept = 0;
  // "" or the damage found ("tensor '<name>' is damaged: ...").
  virtual std::string verdict() = 0;
};

class TransferHelper {
 public:
  // Starts the helper thread when two compute threads are allowed here (the compute threads
  // setting, and not inside a parallel region); otherwise active() is false. With one compute
  // thread a load sums each tensor from the disk while the kernel reads the next one (through
  // ring(), Note [Ring reads]) or each window right after reading it while the kernel reads the
  // next ones ahead (Note [Paired reads]): no second thread is needed.
  TransferHelper();
  // Waits for the ring's reads under way, drops the deferred work not started and joins the
  // helper (in a fork's child, where it does not run, leaves it).
  ~TransferHelper();
  TransferHelper(const TransferHelper&) = delete;
  TransferHelper& operator=(const TransferHelper&) = delete;

  // Whether the helper runs, in this process (fork copies only the calling thread).
  bool active() const;
  // Calls task(0) on the calling thread and task(1) on the helper once the work deferred before
  // has run there, unless task(0) has returned by then (task(1) is then never called: each part
  // takes what is left of shared work); returns once both called parts have returned. An
  // exception either threw is rethrown here (the calling thread's first). Without the helper,
  // calls task(0) only.
  void run_on_both(const std::function<void(int worker)>& task);
  // Runs `work` on the helper after what was queued before it (without it: here, now);
  // finish() gives its verdict. What it reads must stay valid until then.
  void defer(std::shared_ptr<SharedWork> work);
  // Runs `work` on the calling thread one step behind: at the next defer_behind() (after its
  // caller has queued the next tensor's read: Note [Ring reads]) or in finish(), which gives its
  // verdict in the order of all deferred work.
  void defer_behind(std::shared_ptr<SharedWork> work);
  // Takes part in the deferred work not done yet and waits for it: the first damage among the
  // verdicts in the order the work was deferred, or "".
  std::string finish();
  // ResidencyProbe::in_page_cache, on a probe kept for the load (the loading thread's only).
  bool in_page_cache(int fd, std::uint64_t offset, std::uint64_t bytes) {
    return residency_.in_page_cache(fd, offset, bytes);
  }
  // The load's io_uring ring (the loading thread's only), opened at the first call; null where
  // the kernel refuses one (Note [Ring reads]).
  RingReads* ring();

 private:
  void run();
  // Queues a job and returns its ticket: the job is done once done_ reaches it.
  std::uint64_t queue(std::function<void()> job);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;  // queued, the running one at the front
  // Jobs ever queued, and done (in order): changed under the mutex, read by spins without it.
  std::atomic<std::uint64_t> queued_{0}, done_{0};
  std::deque<std::shared_ptr<SharedWork>> deferred_;  // since the last finish(), in order
  std::shared_ptr<SharedWork> behind_;                // defer_behind's, not run yet
  bool stop_ = false;
  pid_t owner_ = 0;
  ResidencyProbe residency_;
  std::unique_ptr<RingReads> ring_;
  bool ring_opened_ = false;  // tried
  std::thread helper_;
};

}  // namespace megatron::checkpoint::detail
