// A byte range of an open file mapped read-only into memory, and reads of it that turn the bus
// errors a mapping raises (the file cut short meanwhile, a failing disk) into error messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace megatron::checkpoint::detail {

// Note [Mapped reads]
//   A checkpoint load with one compute thread (of tensors in the page cache), a slice of a tensor
//   and `inspect --verify` read a tensor's data through a read-only mapping of the file, copying
//   each run to the tensor in the pass that sums it (TileDigests::add with a copy): each byte is
//   read once, by vector loads, instead of the kernel copying it and the sums reading the copy
//   again, and written with streaming stores (CopyStores in fletcher32.h), which unlike ordinary
//   stores do not read each line of the tensor first.
//   A whole tensor's runs of one tile are summed in one open block (sum_lines in
//   tile_digests.cpp). (With two compute threads, whole tensors are read by pread in windows on
//   both threads instead: Note [Paired reads] in tile_digests.h.) With one compute thread, a
//   whole tensor not in the page cache is taken window by window: those the kernel has read ahead
//   through a mapping sharing the descriptor's read-ahead (ReadAhead::shared), the others by
//   pread, each summed after its read (the whole tensor through the mapping made each fault wait
//   for the disk in turn: loads from the disk took +18%). The mapping's
//   faults are cheap only when the page cache holds the file in large folios, which for a file in
//   the cache since its save depends on how it was written: saves write in windows ending on 2 MiB
//   boundaries of the file (tile_digests.cpp). A mapped page that cannot be read raises SIGBUS
//   instead of returning an error; read_mapped turns it into one. Measured figures are in
//   bench/RESULTS.md ("Mapped reads", "Paired reads").
class MappedRange {
 public:
  // How the mapping will be read, told to the kernel: front to back (its faults read ahead
  // further), or in any order (within a selection).
  enum class Access { sequential, selection };
  // Whose read-ahead state the mapping's faults use (the kernel keeps one per open file): the
  // mapping's own, through a description of the file opened for it, for a mapping that reads
  // the range by itself while others read `fd`; or `fd`'s, for a mapping that takes over pages
  // reads through `fd` brought in, so that its faults go on with that read-ahead.
  enum class ReadAhead { own, shared };
  // Maps `bytes` (> 0) at `offset` of the file open at `fd`. valid() is false, and error() says
  // why, when the kernel refuses (no address space left, a file system that cannot map).
  MappedRange(int fd, std::uint64_t offset, std::uint64_t bytes, Access access,
              ReadAhead read_ahead = ReadAhead::own);
  ~MappedRange();
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;

  bool valid() const { return data_ != nullptr; }
  const std::string& error() const { return error_; }
  // The byte at `offset`.
  const char* data() const { return data_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  void* mapping_ = nullptr;  // page-aligned start of the mapping
  std::size_t mapped_bytes_ = 0;
  const char* data_ = nullptr;
  std::uint64_t bytes_ = 0;
  std::string error_;
};

// Calls read(context), which reads `range`: "" once it returned, or why a page of the range could
// not be read (a SIGBUS inside the range, which ends read() where it happened). Only objects with
// trivial destructors may be live inside read() between this call and any read of the mapping
// (they are left without unwinding). Bus errors elsewhere go to the handler there was before.
std::string read_mapped(const MappedRange& range, void (*read)(void*), void* context);

// read_mapped with a callable, which must itself be trivially destructible (a lambda capturing
// by reference).
template <typename Read>
std::string read_mapped(const MappedRange& range, Read& read) {
  return read_mapped(
      range, [](void* context) { (*static_cast<Read*>(context))(); }, &read);
}

}  // namespace megatron::checkpoint::detail
