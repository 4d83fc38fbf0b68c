// Tile digests: the walk over a contiguous tensor's runs, their Fletcher32 sums per tile, and the
// windowed reads and writes that check and compute them (Note [Tile digests]).
#include "checkpoint/tile_digests.h"

#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "checkpoint/fletcher32.h"
#include "checkpoint/mapped_range.h"
#include "checkpoint/ring_reads.h"
#include "checkpoint/tensor_layout.h"
#include "checkpoint/transfer_helper.h"
#include "megatron/error.h"

namespace megatron::checkpoint::detail {

namespace {

// Tensors are written and read as their bytes in memory: little-endian, as the datasets declare.
static_assert(std::endian::native == std::endian::little);

constexpr std::int64_t kModulus = 65535;
// Windowed reads (ReadMethod::windows) read, and sum, windows of about this many bytes: the sums
// read what the read just put in the core's cache.
constexpr std::size_t kWindowBytes = std::size_t(256) << 10;
// Saves write in windows that end on multiples of this many bytes of the file: the kernel then
// keeps the file's pages in folios of this size (a huge page's), which the loads' mappings map
// cheaply. Saved in 256 KiB windows, a checkpoint took 48% longer to load through a mapping
// from the page cache; files written in 2 MiB pieces loaded as fast as through pread
// (bench/RESULTS.md, "Mapped reads").
constexpr std::size_t kWriteWindowBytes = std::size_t(2) << 20;
// HDF5's largest rank.
constexpr std::size_t kMaxRank = 32;

// Where the rows along a cut dimension go: not read, read for the check only, or (>= 0) their
// index in the selected tensor.
constexpr std::int64_t kSkip = -2, kScratch = -1;

// What a walk visits: the lines (rows along the last dimension) and, within each, the columns,
// and where each run goes in the selected tensor.
struct Walk {
  int dim = -1;
  std::vector<std::int64_t> rows;  // dim before the last: per index along dim
  struct Columns {
    hsize_t from;
    hsize_t count;
    std::int64_t local;  // kScratch or the column in the selected tensor
  };
  std::vector<Columns> columns;  // in file order, each inside one tile, at most kMaxRunBytes
  std::vector<hsize_t> local_dims;
};

void add_columns(Walk& walk, const TileGrid& grid, hsize_t from, hsize_t count,
                 std::int64_t local) {
  const hsize_t tile = grid.tile.back();
  const hsize_t most = std::max<hsize_t>(1, kMaxRunBytes / grid.element_bytes);
  while (count > 0) {
    const hsize_t take = std::min({count, tile - from % tile, most});
    walk.columns.push_back({from, take, local});
    from += take;
    count -= take;
    if (local >= 0) local += std::int64_t(take);
  }
}

// The walk over a selection along `dim` (-1: everything); with `cover`, widened along dim to
// whole tiles, the widening read into scratch, so every tile it touches is read whole.
Walk make_walk(const TileGrid& grid, int dim, const std::vector<ShardRun>& runs, bool cover) {
  Walk walk;
  walk.dim = dim;
  walk.local_dims = grid.dims;
  const std::size_t last = grid.dims.size() - 1;
  if (dim < 0) {
    add_columns(walk, grid, 0, grid.dims[last], 0);
    return walk;
  }
  const auto d = std::size_t(dim);
  std::vector<std::int64_t> where(grid.dims[d], kSkip);
  hsize_t selected = 0;
  for (const ShardRun& run : runs) {
    for (std::int64_t k = 0; k < run.length; ++k)
      where[std::size_t(run.global_offset + k)] = run.local_offset + k;
    selected += hsize_t(run.length);
  }
  walk.local_dims[d] = selected;
  if (cover) {
    const hsize_t tile = grid.tile[d];
    for (hsize_t start = 0; start < grid.dims[d]; start += tile) {
      const hsize_t end = std::min(start + tile, grid.dims[d]);
      const bool touched =
          std::any_of(where.begin() + std::ptrdiff_t(start), where.begin() + std::ptrdiff_t(end),
                      [](std::int64_t w) { return w >= 0; });
      for (hsize_t i = start; touched && i < end; ++i)
        if (where[i] == kSkip) where[i] = kScratch;
    }
  }
  if (d < last) {
    walk.rows = std::move(where);
    add_columns(walk, grid, 0, grid.dims[last], 0);
    return walk;
  }
  // Along the last dimension: stretches going to consecutive local columns, or to scratch.
  for (hsize_t c = 0; c < grid.dims[last];) {
    if (where[c] == kSkip) {
      ++c;
      continue;
    }
    hsize_t end = c + 1;
    if (where[c] == kScratch) {
      while (end < grid.dims[last] && where[end] == kScratch)
        ++end;
    } else {
      while (end < grid.dims[last] && where[end] == where[end - 1] + 1)
        ++end;
    }
    add_columns(walk, grid, c, end - c, where[c]);
    c = end;
  }
  return walk;
}

// Whether a tile holds whole lines, consecutive in the file: it spans the last dimension and
// every dimension between the first and the last (a [256, 1024] tile of a [3072, 1024] matrix).
bool tiles_of_whole_lines(const TileGrid& grid) {
  const std::size_t last = grid.dims.size() - 1;
  if (last == 0) return false;
  for (std::size_t k = 1; k <= last; ++k)
    if (grid.tile[k] != grid.dims[k]) return false;
  return true;
}

// Whether the lines of one tile row follow each other in its tiles: no dimension between the
// first and the last is cut into tiles (a 2-D tensor's lines, or a [2, 4, 4096] tensor's in
// [1, 4, 1024] tiles; not in [1, 2, 1024] tiles, where line 2 starts the next tile).
bool lines_follow_in_tiles(const TileGrid& grid) {
  for (std::size_t k = 1; k + 1 < grid.dims.size(); ++k)
    if (grid.tile[k] != grid.dims[k]) return false;
  return grid.dims.size() >= 2;
}

// Lines per tile along the first dimension.
std::uint64_t tile_row_lines(const TileGrid& grid) {
  return grid.tile[0] * (grid.lines() / grid.dims[0]);
}

// Lines [first, end) of a tensor whose lines are cut into tile columns (and
// lines_follow_in_tiles), at `from` (the tensor in memory, or a mapping of its bytes), summed in
// file order and copied to `to` in the same pass (null: only summed): each tile column's runs of
// one tile row are summed in one open block (Fletcher32Steps) and placed in their tile once, not
// folded and placed run by run (a [1024, 4096] f32 weight's 4 KiB runs, four a line: the folds
// and placements took 11% of a one-thread load from the page cache). In file order, not tile
// column by tile column: from memory, 16 KiB strides made a cold load's sums slower. `open`
// holds one block per column, given by the caller: inside read_mapped nothing may own memory (a
// SIGBUS leaves without unwinding).
void sum_lines(const TileGrid& grid, const std::vector<Walk::Columns>& columns, const char* from,
               char* to, std::uint64_t first, std::uint64_t end, TileDigests& sums,
               std::vector<Fletcher32Steps>& open) {
  const std::uint64_t group = tile_row_lines(grid);
  const std::size_t row_bytes = grid.row_bytes();
  // A tile column that is the whole line: a tile row's lines are one run, whatever their length.
  const bool whole = columns.size() == 1 && columns[0].count == grid.dims.back();
  while (first < end) {
    const std::uint64_t stop = std::min(end, (first / group + 1) * group);
    if (whole) {
      const std::size_t at = std::size_t(first * row_bytes);
      sums.add(Run{first, 0, (stop - first) * grid.dims.back()}, from + at, to ? to + at : nullptr);
      first = stop;
      continue;
    }
    std::fill(open.begin(), open.end(), Fletcher32Steps());
    for (std::uint64_t line = first; line < stop; ++line) {
      for (std::size_t c = 0; c < columns.size(); ++c) {
        const std::size_t at = std::size_t(line * row_bytes + columns[c].from * grid.element_bytes);
        const std::size_t bytes = std::size_t(columns[c].count) * grid.element_bytes;
        if (Fletcher32Steps::fits(bytes)) {
          open[c].add(from + at, bytes, to ? to + at : nullptr, CopyStores::streaming);
        } else {
          sums.add(Run{line, columns[c].from, columns[c].count}, from + at, to ? to + at : nullptr);
        }
      }
    }
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (Fletcher32Steps::fits(std::size_t(columns[c].count) * grid.element_bytes))
        sums.add_sums(Run{first, columns[c].from, columns[c].count}, stop - first, open[c].total());
    }
    first = stop;
  }
}

// Calls visit(run, local byte offset or kScratch) for every run of the walk, in file order.
// Where tiles hold whole lines and the walk takes lines whole, consecutive lines of one tile going
// to consecutive places (or all to scratch) make one run of up to kMaxRunBytes: the sums cost
// per run, and a window's worth of 4 KiB rows summed one by one cost several times the check.
template <typename Visit>
void walk_runs(const TileGrid& grid, const Walk& walk, Visit visit) {
  const std::size_t last = grid.dims.size() - 1;
  const std::uint64_t lines = grid.lines();
  const std::int64_t local_columns = std::int64_t(walk.local_dims[last]);
  const std::int64_t row_bytes = std::int64_t(grid.row_bytes());
  const bool merge = tiles_of_whole_lines(grid) && walk.columns.size() == 1 &&
                     walk.columns[0].count == grid.dims[last] &&
                     std::size_t(row_bytes) <= kMaxRunBytes;
  // Lines per index of the first dimension, and so per tile row: lines / dims[0].
  const std::uint64_t lines_per_outer = lines / grid.dims[0];
  Run pending;
  std::int64_t pending_local = kScratch;
  const auto emit = [&] {
    if (pending.elements > 0) visit(pending, pending_local);
    pending.elements = 0;
  };
  std::array<hsize_t, kMaxRank> index{};
  for (std::uint64_t line = 0; line < lines; ++line) {
    std::int64_t local_line = 0;
    bool scratch = false, skip = false;
    for (std::size_t k = 0; k < last && !skip; ++k) {
      std::int64_t i = std::int64_t(index[k]);
      if (int(k) == walk.dim) {
        const std::int64_t to = walk.rows[index[k]];
        skip = to == kSkip;
        scratch = to == kScratch;
        if (to >= 0) i = to;
      }
      local_line = local_line * std::int64_t(walk.local_dims[k]) + i;
    }
    if (!skip) {
      for (const Walk::Columns& c : walk.columns) {
        const std::int64_t local = scratch || c.local < 0 ? kScratch
                                                          : (local_line * local_columns + c.local) *
                                                                std::int64_t(grid.element_bytes);
        const Run run{line, c.from, c.count};
        if (!merge) {
          visit(run, local);
          continue;
        }
        const std::uint64_t lines_pending = pending.elements / grid.dims[last];
        const bool joins =
            pending.elements > 0 && pending.line + lines_pending == line &&
            pending.line / lines_per_outer / grid.tile[0] ==
                line / lines_per_outer / grid.tile[0] &&
            (local == kScratch
                 ? pending_local == kScratch
                 : pending_local >= 0 &&
                       pending_local + std::int64_t(lines_pending) * row_bytes == local) &&
            (lines_pending + 1) * std::uint64_t(row_bytes) <= kMaxRunBytes;
        if (joins) {
          pending.elements += c.count;
        } else {
          emit();
          pending = run;
          pending_local = local;
        }
      }
    } else {
      emit();
    }
    for (std::size_t k = last; k-- > 0;) {  // the next line's index, last-but-one fastest
      if (++index[k] < grid.dims[k]) break;
      index[k] = 0;
    }
  }
  emit();
}

// Runs waiting for one window's transfer: where each lies in the file and in memory.
class Window {
 public:
  explicit Window(std::size_t limit) : limit_(limit) {}
  struct Piece {
    Run run;
    std::uint64_t at;
    char* memory;
    std::size_t bytes;
  };

  void add(const Piece& piece) {
    pieces_.push_back(piece);
    bytes_ += piece.bytes;
  }
  bool full() const { return bytes_ >= limit_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  void clear() {
    pieces_.clear();
    bytes_ = 0;
  }

  // One transfer per stretch of pieces that follow each other in the file (neighbours in
  // memory merged into one iovec); "" or why one failed.
  std::string transfer(int fd, bool write) const {
    std::vector<iovec> iov;
    for (std::size_t i = 0; i < pieces_.size();) {
      const std::uint64_t start = pieces_[i].at;
      std::uint64_t end = start;
      iov.clear();
      for (; i < pieces_.size() && pieces_[i].at == end; ++i) {
        const Piece& p = pieces_[i];
        if (!iov.empty() &&
            static_cast<char*>(iov.back().iov_base) + iov.back().iov_len == p.memory) {
          iov.back().iov_len += p.bytes;
        } else {
          iov.push_back({p.memory, p.bytes});
        }
        end += p.bytes;
      }
      if (std::string error = transfer_fully(fd, start, iov, write); !error.empty()) return error;
    }
    return "";
  }

 private:
  std::size_t limit_;
  std::vector<Piece> pieces_;
  std::size_t bytes_ = 0;
};

// The file offset of a run's first byte, for a dataset whose data starts at `offset`.
std::uint64_t run_offset(const TileGrid& grid, haddr_t offset, const Run& run) {
  return offset + (run.line * grid.dims.back() + run.column) * grid.element_bytes;
}

}  // namespace

std::string transfer_fully(int fd, std::uint64_t offset, std::vector<iovec>& iov, bool write) {
  std::size_t next = 0;
  while (next < iov.size()) {
    const int count = int(std::min<std::size_t>(iov.size() - next, IOV_MAX));
    const ssize_t done = write ? ::pwritev(fd, iov.data() + next, count, off_t(offset))
                               : ::preadv(fd, iov.data() + next, count, off_t(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) return std::strerror(errno);
    if (done == 0) return write ? "nothing could be written" : "the file ends inside it";
    offset += std::uint64_t(done);
    for (std::size_t left = std::size_t(done); left > 0;) {
      const std::size_t take = std::min(left, iov[next].iov_len);
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + take;
      iov[next].iov_len -= take;
      left -= take;
      if (iov[next].iov_len == 0) ++next;
    }
  }
  return "";
}

std::uint64_t TileGrid::lines() const {
  std::uint64_t n = 1;
  for (std::size_t d = 0; d + 1 < dims.size(); ++d)
    n *= dims[d];
  return n;
}

std::uint64_t TileGrid::count() const {
  std::uint64_t n = 1;
  for (std::size_t d = 0; d < dims.size(); ++d)
    n *= (dims[d] + tile[d] - 1) / tile[d];
  return n;
}

TileDigests::TileDigests(TileGrid grid)
    : grid_(std::move(grid)), sums_(static_cast<std::size_t>(grid_.count())) {}

TileDigests::Place TileDigests::place(const Run& run) const {
  const std::size_t rank = grid_.dims.size(), last = rank - 1;
  std::array<hsize_t, kMaxRank> index{};
  std::uint64_t rest = run.line;
  for (std::size_t k = last; k-- > 0;) {
    index[k] = rest % grid_.dims[k];
    rest /= grid_.dims[k];
  }
  index[last] = run.column;
  // The tile (row-major over the grid), the run's first element within it (row-major within the
  // tile) and the tile's element count.
  Place at;
  std::uint64_t elements = 1;
  for (std::size_t k = 0; k < rank; ++k) {
    const hsize_t t = index[k] / grid_.tile[k];
    const hsize_t extent = std::min(grid_.tile[k], grid_.dims[k] - t * grid_.tile[k]);
    at.tile = at.tile * ((grid_.dims[k] + grid_.tile[k] - 1) / grid_.tile[k]) + t;
    at.first = at.first * extent + (index[k] - t * grid_.tile[k]);
    elements *= extent;
  }
  at.elements = elements;
  return at;
}

std::uint64_t TileDigests::tile_of(const Run& run) const {
  return place(run).tile;
}

void TileDigests::add(const Run& run, const void* data, void* copy_to) {
  add_rows(run, 1, data, 0, copy_to, 0);
}

void TileDigests::add_rows(const Run& first, std::uint64_t rows, const void* data,
                           std::size_t stride, void* copy_to, std::size_t to_stride) {
  Fletcher32 sum;
  sum.add_rows(data, first.elements * grid_.element_bytes, stride, rows, copy_to, to_stride,
               CopyStores::streaming);
  add_sums(first, rows, sum);
}

void TileDigests::add_sums(const Run& first, std::uint64_t rows, const Fletcher32& sum) {
  const Place at = place(first);
  const std::uint64_t words_per_element = grid_.element_bytes / 2;
  const std::uint64_t words = at.elements * words_per_element;
  const std::uint64_t start = at.first * words_per_element;
  const std::uint64_t length = rows * first.elements * words_per_element;
  const auto a = std::int64_t(sum.sum1()), b = std::int64_t(sum.sum2());
  // The runs' own B weighs their first word m; in the tile it weighs m + the words after them.
  const auto after = std::int64_t((words - start - length) % std::uint64_t(kModulus));
  TileSums& s = sums_[std::size_t(at.tile)];
  s.a = (s.a + a) % kModulus;
  s.b = (s.b + b + after * a) % kModulus;
}

void TileDigests::normalize() {
  for (TileSums& s : sums_) {
    s.a = (s.a % kModulus + kModulus) % kModulus;
    s.b = (s.b % kModulus + kModulus) % kModulus;
  }
}

std::uint32_t TileDigests::digest(std::uint64_t tile) const {
  const TileSums& s = sums_[std::size_t(tile)];
  return (std::uint32_t(s.b) << 16) | std::uint32_t(s.a);
}

std::vector<std::uint32_t> TileDigests::digests() const {
  std::vector<std::uint32_t> out(sums_.size());
  for (std::size_t t = 0; t < sums_.size(); ++t)
    out[t] = digest(t);
  return out;
}

void for_each_selected_run(const TileGrid& grid, int dim, const std::vector<ShardRun>& runs,
                           const std::function<void(const Run&, std::size_t)>& visit) {
  walk_runs(grid, make_walk(grid, dim, runs, false), [&](const Run& run, std::int64_t local) {
    if (local >= 0) visit(run, std::size_t(local));
  });
}

void write_with_digests(int fd, haddr_t offset, TileDigests& sums, const void* data,
                        const std::string& name) {
  const TileGrid& grid = sums.grid();
  char* tensor = const_cast<char*>(static_cast<const char*>(data));  // iovec is not const
  // Each window is summed just before its write, so the write copies what the sums brought into
  // the cache. Windows end on multiples of kWriteWindowBytes of the file, so the page cache holds
  // the file in large folios (Note [Mapped reads]).
  Window window(kWriteWindowBytes);
  const auto flush = [&] {
    for (const Window::Piece& p : window.pieces())
      sums.add(p.run, p.memory);
    if (std::string error = window.transfer(fd, true); !error.empty())
      throw Error("cannot write tensor '" + name + "': " + error);
    window.clear();
  };
  const std::size_t element = grid.element_bytes;
  const hsize_t columns = grid.dims.back();
  walk_runs(grid, make_walk(grid, -1, {}, false), [&](const Run& run, std::int64_t local) {
    Run rest = run;
    char* memory = tensor + local;
    while (rest.elements > 0) {
      const std::uint64_t at = run_offset(grid, offset, rest);
      const std::uint64_t to_boundary = kWriteWindowBytes - at % kWriteWindowBytes;
      const hsize_t take =
          std::min<hsize_t>(rest.elements, std::max<std::uint64_t>(1, to_boundary / element));
      window.add({Run{rest.line, rest.column, take}, at, memory, std::size_t(take) * element});
      if ((at + take * element) % kWriteWindowBytes == 0 || window.full()) flush();
      memory += take * element;
      rest.elements -= take;
      rest.column += take;
      rest.line += rest.column / columns;
      rest.column %= columns;
    }
  });
  flush();
}

namespace {

// "" when every touched tile's sums equal the stored digest, else the damage naming the first
// tile that does not.
std::string tile_verdict(const TileGrid& grid, const TileDigests& sums,
                         const std::vector<bool>& touched, const std::vector<std::uint32_t>& stored,
                         const std::string& name) {
  for (std::uint64_t t = 0; t < touched.size(); ++t) {
    if (!touched[std::size_t(t)] || sums.digest(t) == stored[std::size_t(t)]) continue;
    std::vector<hsize_t> origin(grid.dims.size());
    std::uint64_t rest = t;
    for (std::size_t k = grid.dims.size(); k-- > 0;) {
      const hsize_t along = (grid.dims[k] + grid.tile[k] - 1) / grid.tile[k];
      origin[k] = (rest % along) * grid.tile[k];
      rest /= along;
    }
    return "tensor '" + name +
           "' is damaged: its data fails the checksum written when it was saved (tile at " +
           chunk_origin_text(origin) + ")";
  }
  return "";
}

std::string unreadable(const std::string& name, const std::string& error) {
  return "tensor '" + name + "' is damaged: its data cannot be read back (" + error + ")";
}

// Windows of a whole tensor read from the page cache on two threads (Note [Paired reads]): each
// is summed right after its read, from the core's own cache, so two fit a core's L2 with room
// to spare. A tensor read from the disk is summed in windows of the same size.
constexpr std::size_t kPairedWindowBytes = std::size_t(512) << 10;
// How much of a tensor's end is asked about to tell whether it is in the page cache (mincore
// took 2 us for 64 KiB, 18 us for 1 MiB).
constexpr std::uint64_t kResidentTailBytes = std::uint64_t(64) << 10;

// A whole tensor in windows for reads and sums on two threads (Note [Paired reads]): window k is
// pieces [k P, (k + 1) P) of the tensor in file order (a piece: one line's run inside one tile
// column, the columns of the whole walk), about kPairedWindowBytes, read with one pread into the
// tensor and summed on its own. The windows and their runs are computed, not listed: cutting a
// tensor into a list of runs first took ~25 us a tensor on the loading thread before any read
// (0.2 ms of a warm 96 MiB load, 3% of it).
class TensorWindows {
 public:
  TensorWindows(int fd, haddr_t offset, const TileGrid& grid, char* tensor)
      : fd_(fd),
        offset_(offset),
        grid_(grid),
        tensor_(tensor),
        columns_(make_walk(grid, -1, {}, false).columns),
        pieces_(grid.lines() * columns_.size()),
        per_window_(whole_lines(
            std::max<std::uint64_t>(1, kPairedWindowBytes * columns_.size() / grid.row_bytes()))),
        lines_follow_(lines_follow_in_tiles(grid)) {}

  const TileGrid& grid() const { return grid_; }
  std::size_t count() const { return std::size_t((pieces_ + per_window_ - 1) / per_window_); }
  // Reads the whole tensor with one pread: "" or why it failed.
  std::string read_whole() const { return read_bytes(0, byte_of(pieces_)); }
  // The whole tensor as one read for the ring (Note [Ring reads]).
  RingRead whole_ring_read() const { return {fd_, offset_, tensor_, byte_of(pieces_), {}}; }
  // Reads windows [from, to) into the tensor with one pread: "" or why it failed.
  std::string read(std::size_t from, std::size_t to) const {
    return read_bytes(byte_of(first_piece(from)), byte_of(first_piece(to)));
  }
  // Adds window k, as it lies in the tensor, to `sums`; `open` is sum_lines' scratch, sized by
  // prepare() beforehand.
  void sum(std::size_t k, TileDigests& sums, std::vector<Fletcher32Steps>& open) const {
    sum_from(k, tensor_, nullptr, sums, open);
  }
  // Copies window k from `file` (the tensor's bytes as the file holds them, mapped) into the
  // tensor and adds it to `sums` in the same pass (Note [Mapped reads]); allocates nothing, so
  // it may run inside read_mapped.
  void copy_and_sum(std::size_t k, const char* file, TileDigests& sums,
                    std::vector<Fletcher32Steps>& open) const {
    sum_from(k, file, tensor_, sums, open);
  }
  // Sizes sum_lines' scratch for sum() and copy_and_sum().
  void prepare(std::vector<Fletcher32Steps>& open) const {
    if (lines_follow_) open.resize(columns_.size());
  }
  // Where window k ends in the tensor (and, from offset_, in the file).
  std::size_t end_byte(std::size_t k) const { return byte_of(first_piece(k + 1)); }

 private:
  // Adds window k, as it lies at `from` (laid out as the tensor), to `sums`, and copies it to `to`
  // when not null.
  void sum_from(std::size_t k, const char* from, char* to, TileDigests& sums,
                std::vector<Fletcher32Steps>& open) const {
    const std::uint64_t first = first_piece(k), end = first_piece(k + 1);
    const std::uint64_t n = columns_.size();
    const auto single = [&](std::uint64_t piece) {
      const Walk::Columns& c = columns_[piece % n];
      const std::size_t at = byte_of(piece);
      sums.add(Run{piece / n, c.from, c.count}, from + at, to ? to + at : nullptr);
    };
    std::uint64_t piece = first;
    for (; piece < end && piece % n != 0; ++piece)  // the end of a line begun before
      single(piece);
    // Whole lines: each tile column's runs of the lines of one tile row follow each other in
    // their tile, and are summed as one (sum_lines).
    if (lines_follow_) {
      sum_lines(grid_, columns_, from, to, piece / n, end / n, sums, open);
    } else {
      for (std::uint64_t q = piece; q < end / n * n; ++q)
        single(q);
    }
    for (piece = std::max(piece, end / n * n); piece < end; ++piece)  // a line's beginning
      single(piece);
  }

  // Windows of whole lines where a line is smaller than a window.
  std::uint64_t whole_lines(std::uint64_t pieces) const {
    const std::uint64_t n = columns_.size();
    return pieces >= n ? pieces / n * n : pieces;
  }
  std::uint64_t first_piece(std::size_t window) const {
    return std::min<std::uint64_t>(window * per_window_, pieces_);
  }
  // Where piece q starts in the tensor (and the file, from offset_); byte_of(pieces_) = its size.
  std::size_t byte_of(std::uint64_t piece) const {
    const std::uint64_t line = piece / columns_.size(), column = piece % columns_.size();
    return std::size_t(line * grid_.row_bytes() + columns_[column].from * grid_.element_bytes);
  }
  std::string read_bytes(std::size_t from, std::size_t to) const {
    std::vector<iovec> iov{{tensor_ + from, to - from}};
    return transfer_fully(fd_, offset_ + from, iov, false);
  }

  int fd_;
  haddr_t offset_;
  TileGrid grid_;
  char* tensor_;
  std::vector<Walk::Columns> columns_;  // of a line, in file order (the whole walk's)
  std::uint64_t pieces_;                // lines x columns
  std::uint64_t per_window_;            // pieces
  bool lines_follow_;                   // lines_follow_in_tiles: sum_lines sums whole lines
};

// Sums of some of a whole tensor's windows (those one thread summed), or why a read failed.
struct SumsPart {
  explicit SumsPart(const TileGrid& grid) : sums(grid) {}
  TileDigests sums;
  std::vector<Fletcher32Steps> open;  // TensorWindows::sum's scratch, kept across windows
  std::string error;
};

// The whole tensor's sums from the parts that together summed every window (Fletcher32 is
// linear).
TileDigests total_of(const std::vector<SumsPart>& parts) {
  TileDigests total(parts[0].sums.grid());
  for (const SumsPart& part : parts) {
    for (std::size_t t = 0; t < total.sums().size(); ++t) {
      total.sums()[t].a += part.sums.sums()[t].a;
      total.sums()[t].b += part.sums.sums()[t].b;
    }
  }
  total.normalize();
  return total;
}

// The verdict on a whole tensor from the parts that together summed every window.
std::string whole_verdict(const std::vector<SumsPart>& parts,
                          const std::vector<std::uint32_t>& stored, const std::string& name) {
  for (const SumsPart& part : parts)
    if (!part.error.empty()) return unreadable(name, part.error);
  const TileDigests total = total_of(parts);
  return tile_verdict(total.grid(), total, std::vector<bool>(total.sums().size(), true), stored,
                      name);
}

// Both threads (the loading thread alone where the helper does not run) take the next window in
// turn, read it (when `read`) and sum it right after, from their own core's cache, into sums of
// their own.
std::string paired(const TensorWindows& windows, bool read,
                   const std::vector<std::uint32_t>& stored, const std::string& name,
                   TransferHelper& helper) {
  std::vector<SumsPart> parts(2, SumsPart(windows.grid()));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  helper.run_on_both([&](int worker) {
    SumsPart& part = parts[std::size_t(worker)];
    windows.prepare(part.open);
    for (;;) {
      const std::size_t k = next.fetch_add(1, std::memory_order_relaxed);
      if (k >= windows.count() || failed.load(std::memory_order_relaxed)) return;
      if (read) part.error = windows.read(k, k + 1);
      if (!part.error.empty()) {
        failed.store(true, std::memory_order_relaxed);
        return;
      }
      windows.sum(k, part.sums, part.open);
    }
  });
  return whole_verdict(parts, stored, name);
}

// How much of a window's end is asked about to tell whether the page cache holds the window: the
// kernel reads ahead in order, so its end is the last of it to arrive (a page not there after
// all is read by the mapping's fault, slower but alike).
constexpr std::uint64_t kResidentWindowTailBytes = std::uint64_t(16) << 10;

// One compute thread, a whole tensor whose end is not in the page cache (Note [Mapped reads]):
// window by window, one the page cache already holds (read ahead while the windows before it
// were read and summed) is copied and summed from a mapping of the file in one pass, and any
// other is read by pread, which waits for the disk and keeps its read-ahead going, and summed
// right after from the core's cache. The copy out of the mapping costs less CPU time than the
// kernel's copy into the tensor (streaming stores, one read of each byte), which pays for the
// sums where the loading thread, not the disk, sets the pace.
std::string read_by_residence(const TensorWindows& windows, int fd, haddr_t offset,
                              std::uint64_t total, const std::vector<std::uint32_t>& stored,
                              const std::string& name, TransferHelper& helper) {
  std::vector<SumsPart> parts(1, SumsPart(windows.grid()));
  SumsPart& part = parts[0];
  windows.prepare(part.open);
  std::unique_ptr<const MappedRange> range;  // mapped at the first window found in the cache
  for (std::size_t k = 0; k < windows.count() && part.error.empty(); ++k) {
    const std::uint64_t begin = k == 0 ? 0 : windows.end_byte(k - 1), end = windows.end_byte(k);
    const std::uint64_t tail = std::min(end - begin, kResidentWindowTailBytes);
    const bool cached = helper.in_page_cache(fd, offset + end - tail, tail);
    if (cached && !range) {
      range = std::make_unique<const MappedRange>(
          fd, offset, total, MappedRange::Access::sequential, MappedRange::ReadAhead::shared);
    }
    if (cached && range->valid()) {
      auto copy = [&] { windows.copy_and_sum(k, range->data(), part.sums, part.open); };
      part.error = read_mapped(*range, copy);
    } else {
      part.error = windows.read(k, k + 1);
      if (part.error.empty()) windows.sum(k, part.sums, part.open);
    }
  }
  return whole_verdict(parts, stored, name);
}

// The sums of a whole tensor in memory, window by window in turn by whichever thread comes next:
// the helper, and the calling thread once it has nothing else to do (TransferHelper::finish).
class WindowSums : public HelperSums {
 public:
  WindowSums(std::shared_ptr<const TensorWindows> windows, std::shared_ptr<const void> owner)
      : windows_(std::move(windows)),
        owner_(std::move(owner)),
        parts_(2, SumsPart(windows_->grid())) {}

  void take_part(int worker) noexcept override {
    SumsPart& part = parts_[std::size_t(worker)];
    windows_->prepare(part.open);
    for (std::size_t k = next_.fetch_add(1, std::memory_order_relaxed); k < windows_->count();
         k = next_.fetch_add(1, std::memory_order_relaxed)) {
      windows_->sum(k, part.sums, part.open);
    }
  }
  std::string verdict() override { return ""; }
  std::vector<std::uint32_t> digests() override { return total_of(parts_).digests(); }

 protected:
  const std::vector<SumsPart>& parts() const { return parts_; }

 private:
  std::shared_ptr<const TensorWindows> windows_;
  std::shared_ptr<const void> owner_;  // keeps the tensor the windows lie in
  std::vector<SumsPart> parts_;
  std::atomic<std::size_t> next_{0};
};

// The check of a whole tensor already read, deferred to the helper (Note [Paired reads]).
class WindowsCheck : public WindowSums {
 public:
  WindowsCheck(std::shared_ptr<const TensorWindows> windows, std::vector<std::uint32_t> stored,
               std::string name, std::shared_ptr<const void> owner)
      : WindowSums(std::move(windows), std::move(owner)),
        stored_(std::move(stored)),
        name_(std::move(name)) {}

  std::string verdict() override { return whole_verdict(parts(), stored_, name_); }

 private:
  std::vector<std::uint32_t> stored_;
  std::string name_;
};

// From the disk: one pread of the whole tensor, as a load without checksums reads it (the
// kernel's largest requests to the disk: smaller preads made cold loads slower), then its sums:
// left to the helper while the loading thread reads on when `owner` keeps the tensor alive (the
// verdict then comes from helper.finish()), else on both threads now.
std::string read_then_check(std::shared_ptr<const TensorWindows> windows,
                            const std::vector<std::uint32_t>& stored, const std::string& name,
                            TransferHelper& helper, std::shared_ptr<const void> owner) {
  if (std::string error = windows->read_whole(); !error.empty()) return unreadable(name, error);
  if (!owner) return paired(*windows, false, stored, name, helper);
  helper.defer(std::make_shared<WindowsCheck>(std::move(windows), stored, name, std::move(owner)));
  return "";
}

// Files read through the ring from the disk with one compute thread (Note [Ring reads]): in
// smaller ones what nothing hides (the last tensor's sums, the ring's set-up) costs more than the
// reads through it save.
constexpr std::uint64_t kRingFileBytes = std::uint64_t(128) << 20;

std::uint64_t file_bytes(int fd) {
  struct stat file {};
  return ::fstat(fd, &file) == 0 ? std::uint64_t(file.st_size) : 0;
}

// One compute thread, a whole tensor read through the ring (Note [Ring reads]): its sums wait
// until the next tensor's read is queued (TransferHelper::defer_behind), then wait for its own
// read and run while the disk reads the next one.
class RingCheck : public SharedWork {
 public:
  RingCheck(std::shared_ptr<const TensorWindows> windows, RingReads& ring,
            std::vector<std::uint32_t> stored, std::string name, std::shared_ptr<const void> owner)
      : windows_(std::move(windows)),
        ring_(ring),
        read_(windows_->whole_ring_read()),
        stored_(std::move(stored)),
        name_(std::move(name)),
        owner_(std::move(owner)),
        parts_(1, SumsPart(windows_->grid())) {}

  RingRead& read() { return read_; }
  // Sums each window once the request it lies in is done; once (with the helper running,
  // finish() offers every deferred work to the calling thread again).
  void take_part(int) noexcept override {
    if (std::exchange(taken_, true)) return;
    SumsPart& part = parts_[0];
    windows_->prepare(part.open);
    std::size_t k = 0;
    for (std::size_t r = 0; r < read_.requests.size(); ++r) {
      part.error = ring_.wait(read_, r);
      if (!part.error.empty()) return;
      const std::uint64_t arrived = read_.requests[r].at + read_.requests[r].bytes;
      for (; k < windows_->count() && windows_->end_byte(k) <= arrived; ++k)
        windows_->sum(k, part.sums, part.open);
    }
  }
  std::string verdict() override { return whole_verdict(parts_, stored_, name_); }

 private:
  std::shared_ptr<const TensorWindows> windows_;
  RingReads& ring_;
  RingRead read_;
  std::vector<std::uint32_t> stored_;
  std::string name_;
  std::shared_ptr<const void> owner_;  // keeps the tensor read into
  std::vector<SumsPart> parts_;
  bool taken_ = false;
};

// Queues the read of a whole tensor on the ring and leaves its check one step behind (with
// `owner`) or does it now: "" or the verdict; nullopt when the ring did not take the read.
std::optional<std::string> read_through_ring(std::shared_ptr<const TensorWindows> windows,
                                             const std::vector<std::uint32_t>& stored,
                                             const std::string& name, TransferHelper& helper,
                                             RingReads& ring,
                                             const std::shared_ptr<const void>& owner) {
  const bool behind = owner != nullptr;
  auto check = std::make_shared<RingCheck>(std::move(windows), ring, stored, name, owner);
  if (!ring.submit(check->read(), check)) return std::nullopt;
  if (behind) {
    helper.defer_behind(check);
    return "";
  }
  check->take_part(0);
  return check->verdict();
}

}  // namespace

bool helper_takes_whole(const TileGrid& grid, const TransferHelper* helper) {
  return helper && helper->active() && grid.lines() * grid.row_bytes() >= 2 * kPairedWindowBytes;
}

std::shared_ptr<HelperSums> write_while_helper_sums(int fd, haddr_t offset, const TileGrid& grid,
                                                    const void* data, const std::string& name,
                                                    TransferHelper& helper,
                                                    std::shared_ptr<const void> owner) {
  char* tensor = const_cast<char*>(static_cast<const char*>(data));  // iovec is not const
  auto windows = std::make_shared<const TensorWindows>(fd, offset, grid, tensor);
  auto sums = std::make_shared<WindowSums>(windows, std::move(owner));
  helper.defer(sums);  // first, so the helper sums while this thread writes
  // One pwrite of the whole tensor, as a save without checksums writes it.
  std::vector<iovec> iov{{tensor, std::size_t(grid.lines() * grid.row_bytes())}};
  if (std::string error = transfer_fully(fd, offset, iov, true); !error.empty())
    throw Error("cannot write tensor '" + name + "': " + error);
  return sums;
}

std::string read_with_digests(int fd, haddr_t offset, const TileGrid& grid,
                              const std::vector<std::uint32_t>& stored, void* out, int dim,
                              const std::vector<ShardRun>& runs, const std::string& name,
                              ReadMethod method, TransferHelper* helper,
                              std::shared_ptr<const void> owner) {
  Walk walk = out ? make_walk(grid, dim, runs, true) : make_walk(grid, -1, {}, false);
  char* const tensor = static_cast<char*>(out);
  const std::uint64_t total = grid.lines() * grid.row_bytes();
  if (method != ReadMethod::windows && tensor && walk.dim < 0 && helper &&
      total >= 2 * kPairedWindowBytes) {
    // Judged by its end: the first pages of a tensor not in the page cache may be there (read
    // ahead behind the tensor before it), its last ones not until the disk has read them all.
    const std::uint64_t tail = std::min<std::uint64_t>(total, kResidentTailBytes);
    const bool cached =
        method == ReadMethod::paired ||
        (method == ReadMethod::automatic && helper->in_page_cache(fd, offset + total - tail, tail));
    // One compute thread and a tensor the load keeps (`owner`) from the disk of a file of
    // kRingFileBytes or more: queued on the ring, its check one step behind (Note [Ring reads]).
    RingReads* ring = method == ReadMethod::ring || (!helper->active() && !cached && owner &&
                                                     file_bytes(fd) >= kRingFileBytes)
                          ? helper->ring()
                          : nullptr;
    if (ring) {
      std::optional<std::string> verdict =
          read_through_ring(std::make_shared<const TensorWindows>(fd, offset, grid, tensor), stored,
                            name, *helper, *ring, owner);
      if (verdict) return *verdict;
    }
    if (helper->active() && !cached) {
      return read_then_check(std::make_shared<const TensorWindows>(fd, offset, grid, tensor),
                             stored, name, *helper, std::move(owner));
    }
    // Paired from the page cache on two threads.
    if (helper->active()) {
      return paired(TensorWindows(fd, offset, grid, tensor), true, stored, name, *helper);
    }
    // From the disk on one thread, not through the ring, window by window: those the kernel has
    // read ahead through a mapping, the others by pread, each summed as it comes in. One pread and
    // the sums after it left the disk idle during the sums (+11-17%), and so did a SCHED_IDLE
    // helper summing behind the reads (EEVDF runs it ahead of the loading thread: idle is a low
    // weight, not a lower class); the whole tensor through a mapping made each page's fault wait
    // for the disk in turn (+18%); every window by pread left the sums on top of the kernel's
    // copy (+6-9%).
    if (!cached) {
      return read_by_residence(TensorWindows(fd, offset, grid, tensor), fd, offset, total, stored,
                               name, *helper);
    }
  }
  std::unique_ptr<const MappedRange> range;
  if (method != ReadMethod::windows) {
    range = std::make_unique<const MappedRange>(
        fd, offset, total,
        walk.dim < 0 ? MappedRange::Access::sequential : MappedRange::Access::selection);
  }
  TileDigests sums(grid);
  std::vector<bool> touched(static_cast<std::size_t>(grid.count()), false);
  std::string error;  // why a read failed
  if (range && range->valid()) {
    // Note [Mapped reads]: each run is summed straight from the mapping and, when the selection
    // keeps it, copied to the tensor in the same pass; the rest of the tiles it touches is
    // summed only.
    std::vector<Fletcher32Steps> open(walk.columns.size());  // sum_lines' blocks
    auto copy_and_sum = [&] {
      if (walk.dim < 0 && walk.columns.size() > 1 && lines_follow_in_tiles(grid)) {
        sum_lines(grid, walk.columns, range->data(), tensor, 0, grid.lines(), sums, open);
        std::fill(touched.begin(), touched.end(), true);
        return;
      }
      walk_runs(grid, walk, [&](const Run& run, std::int64_t local) {
        const std::uint64_t at = run_offset(grid, offset, run) - offset;
        sums.add(run, range->data() + at, tensor && local >= 0 ? tensor + local : nullptr);
        touched[std::size_t(sums.tile_of(run))] = true;
      });
    };
    error = read_mapped(*range, copy_and_sum);
  } else {
    // Windows read in turn (the kernel refused the mapping, or the caller asked for them): runs
    // outside the selection go to scratch, and each window is summed right after its read, from
    // the core's cache.
    Window window(kWindowBytes);
    const auto scratch = std::make_unique_for_overwrite<char[]>(kWindowBytes + kMaxRunBytes);
    std::size_t scratch_used = 0;
    const auto flush = [&] {
      if (window.pieces().empty() || !error.empty()) return;
      error = window.transfer(fd, false);
      for (const Window::Piece& p : window.pieces()) {
        if (!error.empty()) break;
        sums.add(p.run, p.memory);
        touched[std::size_t(sums.tile_of(p.run))] = true;
      }
      window.clear();
      scratch_used = 0;
    };
    walk_runs(grid, walk, [&](const Run& run, std::int64_t local) {
      if (!error.empty()) return;
      const std::size_t bytes = std::size_t(run.elements) * grid.element_bytes;
      const bool kept = tensor && local >= 0;
      char* memory = kept ? tensor + local : scratch.get() + scratch_used;
      if (!kept) scratch_used += bytes;
      window.add({run, run_offset(grid, offset, run), memory, bytes});
      if (window.full()) flush();
    });
    flush();
  }
  if (!error.empty()) return unreadable(name, error);
  return tile_verdict(grid, sums, touched, stored, name);
}

}  // namespace megatron::checkpoint::detail
