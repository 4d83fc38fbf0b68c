// Buffered reads queued through io_uring, for one-thread checkpoint loads (Note [Ring reads]).
#include "checkpoint/ring_reads.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "checkpoint/tile_digests.h"

namespace megatron::checkpoint::detail {

namespace {

// Entries of the submission queue: one read is under way at a time, one entry per kRequestBytes.
constexpr unsigned kEntries = 64;
// The largest request: the kernel caps one read at just under 2 GiB.
constexpr std::size_t kRequestBytes = std::size_t(1) << 30;

}  // namespace

std::unique_ptr<RingReads> RingReads::open() {
  auto ring = std::make_unique<io_uring>();
  // The kernel copies a read's pages into memory in the task work of the thread that queued it.
  // Deferred (Linux 6.1), that work runs only while the thread waits for a completion, so the
  // sums of the tensor before are not interrupted page by page: at 512 MiB the loading thread's
  // CPU time went from 110 to 100 ms and the load from +7% to -4% against a load without
  // checksums (bench/RESULTS.md, "Ring reads"). Older kernels refuse the flags: default work then.
  if (::io_uring_queue_init(kEntries, ring.get(),
                            IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN) != 0 &&
      ::io_uring_queue_init(kEntries, ring.get(), 0) != 0) {
    return nullptr;
  }
  return std::unique_ptr<RingReads>(new RingReads(std::move(ring)));
}

RingReads::RingReads(std::unique_ptr<io_uring> ring) : ring_(std::move(ring)), owner_(::getpid()) {}

RingReads::~RingReads() {
  if (::getpid() == owner_) {
    while (!in_flight_.empty() && reap_one()) {
    }
  }
  ::io_uring_queue_exit(ring_.get());
  for (const Descriptor& d : descriptors_)
    ::close(d.fd);
}

int RingReads::own_descriptor(int fd) {
  struct stat file {};
  if (::fstat(fd, &file) != 0) return fd;
  for (const Descriptor& d : descriptors_)
    if (d.device == file.st_dev && d.inode == file.st_ino) return d.fd;
  const int own = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
  if (own < 0) return fd;  // no /proc: the caller's descriptor, slower but alike
  descriptors_.push_back({file.st_dev, file.st_ino, own});
  return own;
}

bool RingReads::submit(RingRead& read, std::shared_ptr<const void> keep) {
  const std::size_t count =
      std::max<std::size_t>(1, (read.bytes + kRequestBytes - 1) / kRequestBytes);
  if (count > kEntries) return false;
  // Two reads under way at once read the file no faster and cost more CPU time (bench/RESULTS.md,
  // "Ring reads"); the one before is usually done by now (its tensor is summed next).
  while (!in_flight_.empty() && reap_one()) {
  }
  const int fd = own_descriptor(read.fd);
  read.requests.assign(count, {});
  for (std::size_t k = 0; k < count; ++k) {
    RingRead::Request& request = read.requests[k];
    request.at = k * kRequestBytes;
    request.bytes = std::min(kRequestBytes, read.bytes - request.at);
    io_uring_sqe* entry = ::io_uring_get_sqe(ring_.get());
    ::io_uring_prep_read(entry, fd, read.to + request.at, unsigned(request.bytes),
                         read.offset + request.at);
    ::io_uring_sqe_set_data(entry, &request);
    if (k + 1 < count) entry->flags |= IOSQE_IO_LINK;  // in order, one after the other
  }
  in_flight_.push_back({&read, std::move(keep), count});
  // A refusal here (the kernel short of memory, a signal) leaves the entries queued in the ring:
  // reap_one() submits them again before it waits.
  ::io_uring_submit(ring_.get());
  return true;
}

bool RingReads::reap_one() {
  io_uring_cqe* completion = nullptr;
  for (;;) {
    if (::io_uring_peek_cqe(ring_.get(), &completion) == 0 && completion) break;
    const int error = ::io_uring_submit_and_wait(ring_.get(), 1);
    if (error < 0 && error != -EINTR && error != -EAGAIN && error != -EBUSY) return false;
  }
  auto* request = static_cast<RingRead::Request*>(::io_uring_cqe_get_data(completion));
  request->result = completion->res;
  request->done = true;
  ::io_uring_cqe_seen(ring_.get(), completion);
  const auto of = std::find_if(in_flight_.begin(), in_flight_.end(), [&](const InFlight& f) {
    const std::less<const RingRead::Request*> before;  // a total order across arrays
    return !before(request, f.read->requests.data()) &&
           before(request, f.read->requests.data() + f.read->requests.size());
  });
  if (of != in_flight_.end() && --of->left == 0) in_flight_.erase(of);
  return true;
}

std::string RingReads::wait(RingRead& read, std::size_t index) {
  const RingRead::Request& request = read.requests[index];
  while (!request.done && reap_one()) {
  }
  // What the kernel left: short (the file ends, or a signal), interrupted, cancelled (a request
  // linked after a short one), or never seen (waiting failed) is read with pread.
  if (request.done && request.result < 0 && request.result != -EINTR && request.result != -EAGAIN &&
      request.result != -ECANCELED) {
    return std::strerror(-request.result);
  }
  const std::size_t from =
      request.done && request.result >= 0 ? std::size_t(request.result) : std::size_t(0);
  if (from >= request.bytes) return "";
  std::vector<iovec> rest{{read.to + request.at + from, request.bytes - from}};
  return transfer_fully(read.fd, read.offset + request.at + from, rest, false);
}

std::string RingReads::wait(RingRead& read) {
  for (std::size_t k = 0; k < read.requests.size(); ++k)
    if (std::string error = wait(read, k); !error.empty()) return error;
  return "";
}

}  // namespace megatron::checkpoint::detail
