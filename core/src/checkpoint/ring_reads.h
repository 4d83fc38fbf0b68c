// Buffered reads queued to the kernel through io_uring (liburing): with one compute thread a load
// queues the read of a whole tensor and sums the tensor before it while the disk reads this one
// (Note [Ring reads] in tile_digests.h).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct io_uring;  // liburing's, kept out of the readers of this header

namespace megatron::checkpoint::detail {

// One read for a RingReads: `bytes` at `offset` of the file at `fd` into `to`.
struct RingRead {
  int fd = -1;
  std::uint64_t offset = 0;
  char* to = nullptr;
  std::size_t bytes = 0;

  // The read's requests to the kernel (one per 1 GiB, which one request cannot exceed), in order,
  // and what the kernel said of each.
  struct Request {
    std::size_t at = 0;  // from the read's start
    std::size_t bytes = 0;
    int result = 0;  // bytes read or -errno
    bool done = false;
  };
  std::vector<Request> requests;
};

class RingReads {
 public:
  // A ring for the calling thread (the only one that may use it), or null where the kernel
  // refuses io_uring (the sysctl kernel.io_uring_disabled, a container's seccomp filter, a kernel
  // without it): the caller then reads another way.
  static std::unique_ptr<RingReads> open();
  // Waits for every request still under way (their memory is kept alive until then) and closes
  // the descriptors it opened; in a fork's child, whose ring is its parent's too, only lets go.
  ~RingReads();
  RingReads(const RingReads&) = delete;
  RingReads& operator=(const RingReads&) = delete;

  // Queues `read` once the reads queued before it are done (one read under way at a time);
  // `keep` (owning `read` and its memory) is held until the kernel is done with it, whatever
  // happens to the caller. False, with nothing queued, for a read larger than the ring takes at
  // once (64 GiB): the caller reads it another way.
  bool submit(RingRead& read, std::shared_ptr<const void> keep);
  // Waits until request `request` of `read` is done, reading with pread what the kernel left short
  // (or all of it, should waiting on the ring fail: what is still under way then writes the same
  // bytes): "" or why the read failed.
  std::string wait(RingRead& read, std::size_t request);
  // wait() for every request of `read`, in order.
  std::string wait(RingRead& read);

 private:
  struct InFlight {
    RingRead* read;
    std::shared_ptr<const void> keep;
    std::size_t left;  // requests not reaped
  };
  // A descriptor the ring opened for a file of the caller's.
  struct Descriptor {
    dev_t device;
    ino_t inode;
    int fd;
  };

  explicit RingReads(std::unique_ptr<io_uring> ring);
  // Takes one completion, waiting for it (and queuing what submit() could not): false when
  // waiting failed.
  bool reap_one();
  // The ring's own descriptor of the file open at `fd` (the same file reopened: its read-ahead
  // state is the ring's alone, Note [Ring reads]), or `fd` where it cannot be reopened.
  int own_descriptor(int fd);

  std::unique_ptr<io_uring> ring_;
  std::vector<InFlight> in_flight_;
  std::vector<Descriptor> descriptors_;
  pid_t owner_ = 0;
};

}  // namespace megatron::checkpoint::detail
