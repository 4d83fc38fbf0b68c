// Page-cache residency of a file's byte ranges: mincore(2) on one kept mapping of the file.
#include "checkpoint/page_cache.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace megatron::checkpoint::detail {

ResidencyProbe::~ResidencyProbe() {
  unmap();
}

void ResidencyProbe::unmap() {
  if (mapping_) ::munmap(mapping_, mapped_bytes_);
  mapping_ = nullptr;
  mapped_bytes_ = 0;
  fd_ = -1;
}

bool ResidencyProbe::map(int fd, std::uint64_t end) {
  struct stat file {};
  if (::fstat(fd, &file) != 0) return false;
  if (mapping_ && fd == fd_ && file.st_dev == device_ && file.st_ino == inode_ &&
      end <= mapped_bytes_) {
    return true;
  }
  unmap();
  const auto bytes = std::size_t(std::max<std::uint64_t>(end, std::uint64_t(file.st_size)));
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  mapping_ = p;
  mapped_bytes_ = bytes;
  fd_ = fd;
  device_ = file.st_dev;
  inode_ = file.st_ino;
  return true;
}

bool ResidencyProbe::in_page_cache(int fd, std::uint64_t offset, std::uint64_t bytes) {
  if (!map(fd, offset + bytes)) return true;
  const auto page = std::uint64_t(::sysconf(_SC_PAGESIZE));
  const std::uint64_t start = offset - offset % page;
  const auto length = std::size_t(offset + bytes - start);
  pages_.resize((length + page - 1) / page);
  if (::mincore(static_cast<char*>(mapping_) + start, length, pages_.data()) != 0) return true;
  return std::all_of(pages_.begin(), pages_.end(), [](unsigned char b) { return (b & 1) != 0; });
}

}  // namespace megatron::checkpoint::detail
