// Read-only mappings of checkpoint tensor data, and bus errors on them turned into messages
// (Note [Mapped reads] in mapped_range.h).
#include "checkpoint/mapped_range.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace megatron::checkpoint::detail {

namespace {

// What this thread's read_mapped is reading, for the handler: initial-exec so the handler reads
// it without the lazy allocation a dlopen'ed library's thread-local storage may need.
struct ActiveRead {
  const char* begin = nullptr;
  std::uint64_t bytes = 0;
  sigjmp_buf* jump = nullptr;
};
[[gnu::tls_model("initial-exec")]] thread_local ActiveRead active;

struct sigaction previous_bus_action;

void on_bus_error(int signal, siginfo_t* info, void* context) {
  const auto* at = static_cast<const char*>(info->si_addr);
  if (active.jump && at >= active.begin && std::uint64_t(at - active.begin) < active.bytes)
    siglongjmp(*active.jump, 1);
  // Not ours: what was there before. With the default action (or SIG_IGN, which the kernel does
  // not honour for a fault) the faulting access runs again and ends the process as it would have.
  if (previous_bus_action.sa_flags & SA_SIGINFO) {
    previous_bus_action.sa_sigaction(signal, info, context);
  } else if (previous_bus_action.sa_handler == SIG_DFL ||
             previous_bus_action.sa_handler == SIG_IGN) {
    ::signal(signal, SIG_DFL);
  } else {
    previous_bus_action.sa_handler(signal);
  }
}

void install_bus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_bus_error;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &previous_bus_action);
  });
}

}  // namespace

MappedRange::MappedRange(int fd, std::uint64_t offset, std::uint64_t bytes, Access access,
                         ReadAhead read_ahead)
    : bytes_(bytes) {
  const auto page = std::uint64_t(::sysconf(_SC_PAGESIZE));
  const std::uint64_t start = offset - offset % page;
  mapped_bytes_ = std::size_t(bytes + (offset - start));
  // ReadAhead::own: mapped through an open file description of its own (reopened through /proc,
  // which gives a new one): the kernel keeps its read-ahead state per open file, and HDF5's small
  // metadata reads through `fd` made the faults' read-ahead start over (a cold one-thread load of
  // 512 MiB took 293 ms so and 262 ms this way). Without /proc, `fd` does. ReadAhead::shared:
  // through `fd`, whose preads started the read-ahead the faults then keep going (with each
  // tensor's faults starting a read-ahead of their own, cold one-thread loads of 64 MiB took +19%
  // over loads without checksums, against +1% to +7%).
  const std::string own = "/proc/self/fd/" + std::to_string(fd);
  const int own_fd = read_ahead == ReadAhead::own ? ::open(own.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  void* p = ::mmap(nullptr, mapped_bytes_, PROT_READ, MAP_SHARED, own_fd >= 0 ? own_fd : fd,
                   off_t(start));
  if (own_fd >= 0) ::close(own_fd);
  if (p == MAP_FAILED) {
    error_ = std::strerror(errno);
    return;
  }
  mapping_ = p;
  data_ = static_cast<const char*>(p) + (offset - start);
  ::madvise(p, mapped_bytes_, access == Access::sequential ? MADV_SEQUENTIAL : MADV_NORMAL);
}

MappedRange::~MappedRange() {
  if (mapping_) ::munmap(mapping_, mapped_bytes_);
}

std::string read_mapped(const MappedRange& range, void (*read)(void*), void* context) {
  install_bus_handler();
  sigjmp_buf jump;
  // Saves the signal mask, so the jump out of the handler unblocks SIGBUS again.
  if (sigsetjmp(jump, 1) != 0) {
    active = {};
    return "a page of it could not be read (the file was cut short or the disk failed)";
  }
  active = {range.data(), range.bytes(), &jump};
  read(context);
  active = {};
  return "";
}

}  // namespace megatron::checkpoint::detail
