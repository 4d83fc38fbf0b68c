// Checksums of tensors stored as contiguous datasets, one per tile, kept in attributes: the tile
// grid, the walk over the runs of a tensor that a read or a write touches, and the sums
// (Note [Tile digests]).
#pragma once

#include <hdf5.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/fletcher32.h"
#include "checkpoint/transfer_helper.h"
#include "megatron/nn/parameter.h"

namespace megatron::checkpoint::detail {

// Note [Tile digests]
//   A tensor is one contiguous, row-major dataset, so a save writes and a whole-tensor load reads
//   long runs of bytes: chunk tiles, which the format used before (HDF5's Fletcher32 filter on
//   chunks), cost 30-50% on reads and 14-26% CPU on writes by themselves (bench/RESULTS.md,
//   checkpoint_floor_bench). The checksums still cover tiles (chunk_dims' shape, about 1 MiB,
//   the last dimension cut at 1024), so a slice of any layout is checked by reading only the
//   tiles it touches, and a damaged tile fails exactly the reads that touch it. Two attributes:
//   `fletcher32_tile`, the tile shape, and `fletcher32`, one value per tile (tiles row-major).
//   A tile's value is Fletcher32 over its bytes in row-major order within the tile, as 16-bit
//   big-endian words w_0..w_{n-1}, with both sums kept modulo 65535: B << 16 | A, A = sum of w_k,
//   B = sum of (n - k) w_k (HDF5's sums; unlike its filter, 0 stays 0). Fletcher32 is linear, so
//   a tile can be summed from runs in any order and from several ranks: a run of m words at word
//   p of the tile adds its own A and B + (n - p - m) A. A sharded save adds every rank's runs
//   with one all-reduce. A load sums each window right after reading it, on two threads
//   (Note [Paired reads]), or each run as it copies it out of a mapping of the file
//   (Note [Mapped reads]). Elements of 2 bytes or more only, so runs start on whole words;
//   uint8 tensors keep HDF5-filtered chunks. HDF5 tools read the data as any contiguous dataset but
//   do not check it; `megatron-app inspect --verify` does.
// Note [Paired reads]
//   Where two compute threads are allowed (the node's cores split among its ranks) and a whole
//   tensor spans two windows of 512 KiB or more, the loading thread and the load's helper thread
//   (TransferHelper, transfer_helper.h) read it together:
//   - From the page cache (its last 64 KiB read into it, asked with mincore: ResidencyProbe in
//     page_cache.h): each thread takes the next window in turn, reads it into the tensor with one
//     pread and sums it right after, from its own core's cache, into sums of its own; the sums
//     are added once both are done. Each byte crosses memory as often as in a load without
//     checksums (the kernel's copy), and each core's sums overlap the other core's copy.
//   - From the disk: the loading thread reads the whole tensor with one pread, as a load without
//     checksums does (the kernel's largest requests; smaller reads, on one thread or two, made
//     cold loads 7-20% slower), and the helper sums it while the loading thread reads the next
//     tensors. The load then takes part in what is left (TransferHelper::finish) and throws the
//     first damage in file order. Callers that cannot keep the tensor alive until then (no
//     `owner`) sum it on both threads before the read returns.
//   A window's runs are computed from the tensor's shape (TensorWindows), and each tile column's
//   runs of one tile row summed as one piece (TileDigests::add_rows). Page-cache loads took -8%
//   to +2% more than loads without checksums, loads from the disk +3% to +7% (bench/RESULTS.md,
//   "Paired reads", "A quiet loading thread", "Sums by tile column"). What was tried before,
//   all slower (+5-30%): one thread reading while the other summed the same bytes, from the page
//   cache through a mapping or from the tensor behind the read (a third pass over memory, or the
//   second core reading lines the first had just written); one thread copying and summing from a
//   mapping (page faults). With one thread a tensor in the page cache is copied from a mapping
//   and summed in one pass (Note [Mapped reads]); one from the disk is read through io_uring
//   with its sums one tensor behind (Note [Ring reads]) or, in files under 128 MiB, where the
//   kernel refuses io_uring, and for a tensor the caller does not keep, taken window by window:
//   a window the kernel has already read ahead is copied and summed from a mapping that shares
//   the descriptor's read-ahead, any other is read by pread, which waits for the disk and keeps
//   the read-ahead going, and summed right after (read_by_residence in tile_digests.cpp). The
//   copy out of the mapping costs less than the kernel's copy, which pays for the sums (bench/
//   RESULTS.md, "Windows by residence"). Before: every window by pread (the sums on top of the
//   kernel's copy), one pread then the sums (the disk idle meanwhile), a SCHED_IDLE helper
//   summing behind the reads (no better: idle is only a low weight in the fair class, and
//   `perf sched` showed it run while the loading thread was runnable).
//   The loading thread does not wait for a helper still busy with work deferred before: its part
//   of a paired read is dropped when the loading thread has taken every window by then.
// Note [Ring reads]
//   With one compute thread, a whole tensor from the disk that the load keeps (`owner`: a load's
//   tensors, not a CheckpointReader's slices) in a file of 128 MiB or more is read with one
//   buffered read queued through io_uring (RingReads, ring_reads.h), and its check waits one
//   step (TransferHelper::defer_behind): the next tensor's call queues its own read and then
//   sums this tensor while the disk reads the next; finish() sums the last. The kernel copies a
//   read's pages into the tensor on the loading thread itself (task work, no worker thread), so
//   the sums (~25 ms of CPU per 512 MiB, from memory) fill waits that a pread spends blocked, and
//   the disk gets the same whole-tensor reads as a load without checksums. Three choices, each
//   measured (bench/RESULTS.md, "Ring reads"): the reads go through a descriptor of the ring's
//   own for the file (reopened through /proc/self/fd), since HDF5's small reads of the next
//   dataset's header, ahead of the tensor under way, otherwise reset the read-ahead that read
//   relies on (+3.2% against -1.2%); the task work is deferred to the thread's waits
//   (IORING_SETUP_DEFER_TASKRUN), not run as pages arrive, which interrupted the sums (+7.3%
//   against -4.1%); one read is under way at a time (two: no faster, more CPU). Against a load
//   without checksums at 512 MiB: -4% to +0.5%, where windows by residence took +9%; at 96 MiB
//   the last tensor's sums and the ring's set-up, which nothing hides, made it +3% to +7%
//   against -1% by residence, and from 144 MiB on the ring was ahead (-4% to -6% against -2% to
//   +1%): hence the 128 MiB floor. Where the kernel refuses io_uring (kernel.io_uring_disabled,
//   a container's seccomp filter) loads read by residence.
// Note [Summed beside the writes]
//   Where the helper runs, a save writes each whole tensor of two windows or more with one pwrite,
//   as a save without checksums does, while the helper sums the same tensor from memory; the
//   digests' attribute is created with the dataset (in its header) and filled in once the helper
//   is done, at the end of the file's tensors. Written to the page cache (tmpfs, no disk), such
//   saves took 1% longer than saves without checksums, against 25% for one thread summing each
//   window just before writing it, which remains where one compute thread is allowed and for
//   smaller tensors (bench/RESULTS.md, "Summed beside the writes"). Tried before and slower: two
//   threads each summing and writing windows (+68% at 512 MiB: the page cache's writeback
//   throttled two writers) and a second thread in an OpenMP region per tensor (+50-120%: its
//   spinning). The sums are the same either way (Fletcher32 is linear).
inline constexpr const char* kTileShapeAttribute = "fletcher32_tile";
inline constexpr const char* kTileDigestsAttribute = "fletcher32";

// The tiles of a dataset of `dims` (rank >= 1, none zero) of `tile` shape.
struct TileGrid {
  std::vector<hsize_t> dims;
  std::vector<hsize_t> tile;
  std::size_t element_bytes = 0;

  std::uint64_t lines() const;  // rows along the last dimension: product of the other dimensions
  std::uint64_t count() const;  // tiles
  std::size_t row_bytes() const { return std::size_t(dims.back()) * element_bytes; }
};

// Values in file order: `elements` from column `column` of line `line` (a line is a row along the
// last dimension); past the line's end only when the tile holds whole lines (the next lines).
struct Run {
  std::uint64_t line = 0;
  hsize_t column = 0;
  hsize_t elements = 0;
};

// Both Fletcher32 sums of a tile, modulo 65535.
struct TileSums {
  std::int64_t a = 0;
  std::int64_t b = 0;
};

// Tile sums built from runs (each inside one tile) given in any order.
class TileDigests {
 public:
  explicit TileDigests(TileGrid grid);
  // Adds the run's bytes, at `data`; with `copy_to`, also copies them there in the same pass,
  // with streaming stores (a load's copy into its tensor: CopyStores in fletcher32.h).
  void add(const Run& run, const void* data, void* copy_to = nullptr);
  // add() of `rows` runs: `first` and the same columns of the next rows - 1 lines, at
  // data + r * stride (copied to copy_to + r * to_stride, streaming), which must follow each other
  // in one tile (its lines consecutive in it: a 2-D tensor's lines inside one tile row). Folded
  // once per block of the rows, not once per run (Fletcher32::add_rows).
  void add_rows(const Run& first, std::uint64_t rows, const void* data, std::size_t stride,
                void* copy_to = nullptr, std::size_t to_stride = 0);
  // Adds the sums `sum` of such rows, summed elsewhere.
  void add_sums(const Run& first, std::uint64_t rows, const Fletcher32& sum);
  // The tile a run lies in.
  std::uint64_t tile_of(const Run& run) const;
  // Every tile's sums (an all-reduce adds several ranks' and normalize() reduces them again).
  std::vector<TileSums>& sums() { return sums_; }
  const std::vector<TileSums>& sums() const { return sums_; }
  void normalize();
  std::uint32_t digest(std::uint64_t tile) const;
  std::vector<std::uint32_t> digests() const;
  const TileGrid& grid() const { return grid_; }

 private:
  // Where a run lies: its tile, its first element within the tile and the tile's elements.
  struct Place {
    std::uint64_t tile = 0;
    std::uint64_t first = 0;
    std::uint64_t elements = 0;
  };
  Place place(const Run& run) const;

  TileGrid grid_;
  std::vector<TileSums> sums_;
};

// Whether tensors of this element size are stored with tile digests (else: filtered chunks).
inline bool uses_tile_digests(std::size_t element_bytes) {
  return element_bytes % 2 == 0;
}

// Calls visit(run, local_byte_offset) for every run of `grid`'s tensor inside the selection:
// along `dim` (-1: everything) only the rows of `runs`, with the byte offset of the run in the
// selected tensor (the runs' rows at their local offsets). Runs lie in one tile, hold at most
// kMaxRunBytes, and come in file order. A sharded save sums its own part with it.
inline constexpr std::size_t kMaxRunBytes = std::size_t(256) << 10;
void for_each_selected_run(const TileGrid& grid, int dim, const std::vector<ShardRun>& runs,
                           const std::function<void(const Run&, std::size_t)>& visit);

// preadv or pwritev of all of `iov` (no empty entries) at `offset`, resuming after short
// transfers and EINTR; "" or why it failed. Advances `iov`.
std::string transfer_fully(int fd, std::uint64_t offset, std::vector<iovec>& iov, bool write);

// Writes a whole tensor (`data`, contiguous) into the dataset's bytes at `offset` of the file
// open for writing at `fd`, in windows ending on 2 MiB boundaries of the file, adding each window
// of runs to `sums` just before it is written;
// throws megatron::Error naming `name` and why the write failed.
void write_with_digests(int fd, haddr_t offset, TileDigests& sums, const void* data,
                        const std::string& name);

// Whether a whole tensor of `grid` is read or written together with `helper` (Note [Paired
// reads], Note [Summed beside the writes]): the helper runs and the tensor spans two windows.
bool helper_takes_whole(const TileGrid& grid, const TransferHelper* helper);

// The tile sums of a whole tensor taken on a TransferHelper (and by the calling thread in its
// finish()).
class HelperSums : public SharedWork {
 public:
  // The tiles' digests, once TransferHelper::finish() has returned.
  virtual std::vector<std::uint32_t> digests() = 0;
};

// Writes a whole tensor (`data`, contiguous, kept alive by `owner` until helper.finish()) into
// the dataset's bytes at `offset` of the file at `fd` with one pwrite while the helper sums it
// (Note [Summed beside the writes]); throws megatron::Error naming `name` and why the write
// failed.
std::shared_ptr<HelperSums> write_while_helper_sums(int fd, haddr_t offset, const TileGrid& grid,
                                                    const void* data, const std::string& name,
                                                    TransferHelper& helper,
                                                    std::shared_ptr<const void> owner);

// How read_with_digests reads:
// - automatic: as loads do: a whole tensor given a `helper` on two threads when it runs (Note
//   [Paired reads]: paired from the page cache, else read then checked), in windows read and
//   summed in turn on this thread when it does not and the tensor is not in the page cache;
//   anything else through a mapping (Note [Mapped reads]);
// - windows: windows of pread in turn, each summed right after its read (when the kernel refuses
//   the mapping; the tests' reference);
// - paired, read_then_check: a whole tensor as automatic reads one from the page cache or from
//   the disk, wherever it is (tests); for a selection or the check alone, as automatic;
// - ring: a whole tensor through the load's io_uring ring wherever it is, on one thread or two,
//   its check one step behind with `owner` (Note [Ring reads]; tests), as automatic where the
//   kernel refuses io_uring.
enum class ReadMethod { automatic, windows, paired, read_then_check, ring };

// Reads from the dataset at `offset` of the file at `fd` every tile the selection touches (whole:
// rows and columns outside the selection are summed too), checks each against `stored`, and puts
// the selection into `out` (null: only checks). "" when intact, else
// "tensor '<name>' is damaged: ..." naming the first bad tile. With `helper` running and `owner`
// keeping `out` alive, the check of a whole tensor read from the disk may be left to the helper:
// its verdict then comes from helper->finish() (Note [Paired reads]).
std::string read_with_digests(int fd, haddr_t offset, const TileGrid& grid,
                              const std::vector<std::uint32_t>& stored, void* out, int dim,
                              const std::vector<ShardRun>& runs, const std::string& name,
                              ReadMethod method = ReadMethod::automatic,
                              TransferHelper* helper = nullptr,
                              std::shared_ptr<const void> owner = nullptr);

}  // namespace megatron::checkpoint::detail
