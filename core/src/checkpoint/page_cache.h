// Which byte ranges of an open file are in the page cache: how a checkpoint load tells a tensor
// read lately from one that must come from the disk (Note [Paired reads] in tile_digests.h).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace megatron::checkpoint::detail {

// Asks mincore(2), which counts a page only once the disk's read of it has finished (cachestat(2)
// also counts pages still being read ahead, so a tensor whose read had only started looked read:
// its paired reads then waited on the disk in 512 KiB pieces, 4.5 ms for 4 MiB against 0.4 ms for
// one pread). mincore needs a mapping: one read-only mapping of the whole file, made at the first
// question and kept until the probe is destroyed or asked about another file, is never read (a
// mapping per question cost ~40 us, mostly its munmap, 1.8 ms of a cold 512 MiB load).
class ResidencyProbe {
 public:
  ResidencyProbe() = default;
  ~ResidencyProbe();
  ResidencyProbe(const ResidencyProbe&) = delete;
  ResidencyProbe& operator=(const ResidencyProbe&) = delete;

  // Whether every page of the `bytes` (> 0) at `offset` of the file open at `fd` is in the page
  // cache and read. True when the kernel cannot tell (a file system that cannot map): callers then
  // read as from the page cache, which is correct either way, only slower from the disk.
  bool in_page_cache(int fd, std::uint64_t offset, std::uint64_t bytes);

 private:
  // Maps the file at `fd` from its start through at least `end` (its whole size when larger).
  bool map(int fd, std::uint64_t end);
  void unmap();

  int fd_ = -1;
  dev_t device_ = 0;  // the mapped file's identity: a descriptor number may be reused
  ino_t inode_ = 0;
  void* mapping_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  std::vector<unsigned char> pages_;  // mincore's answer, kept to spare an allocation per question
};

}  // namespace megatron::checkpoint::detail
