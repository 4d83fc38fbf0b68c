// Direct chunk I/O of tensors: tiles copied from the tensor into a chunk buffer, summed as they
// are copied, and written with their Fletcher32 checksum; read with scattered reads straight into
// the tensor's rows and checked there (Note [Direct chunk I/O]).
#include "checkpoint/chunk_io.h"

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <utility>

#include "checkpoint/fletcher32.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_layout.h"
#include "checkpoint/tile_digests.h"
#include "megatron/error.h"

namespace megatron::checkpoint::detail {

namespace {

constexpr std::size_t kChecksumBytes = 4;

// Which part of a tensor a read wants: everything (dim < 0), or along `dim` the rows of `runs`,
// each placed at its local offset in the output.
struct Selection {
  int dim = -1;
  std::vector<ShardRun> runs;

  // The output's dimensions for a tensor of `dims`.
  std::vector<hsize_t> dims(const std::vector<hsize_t>& global) const {
    std::vector<hsize_t> out = global;
    if (dim < 0) return out;
    hsize_t rows = 0;
    for (const ShardRun& run : runs)
      rows += hsize_t(run.length);
    out[std::size_t(dim)] = rows;
    return out;
  }

  // Maps a global index along `dim` to its output index; false when no run holds it.
  bool local(hsize_t global, hsize_t& out) const {
    for (const ShardRun& run : runs) {
      if (global >= hsize_t(run.global_offset) &&
          global < hsize_t(run.global_offset + run.length)) {
        out = hsize_t(run.local_offset) + (global - hsize_t(run.global_offset));
        return true;
      }
    }
    return false;
  }
};

// The chunk grid of a dataset and the walk over it, last dimension fastest.
struct ChunkGrid {
  std::vector<hsize_t> dims;
  std::vector<hsize_t> chunk;
  std::size_t element_bytes = 0;
  std::size_t chunk_bytes = 0;

  // The origin of every chunk, last dimension fastest.
  std::vector<std::vector<hsize_t>> origins() const {
    std::vector<std::vector<hsize_t>> all;
    std::vector<hsize_t> origin(dims.size(), 0);
    do {
      all.push_back(origin);
    } while (next(origin));
    return all;
  }

  // The next chunk origin after `origin`; false after the last.
  bool next(std::vector<hsize_t>& origin) const {
    for (std::size_t d = dims.size(); d-- > 0;) {
      origin[d] += chunk[d];
      if (origin[d] < dims[d]) return true;
      origin[d] = 0;
    }
    return false;
  }

  // Calls copy(tensor byte offset, chunk byte offset, bytes) for each row (along the last
  // dimension) of the part of the chunk at `origin` that lies inside the tensor: the tensor is
  // contiguous, the chunk buffer full chunk size, both row-major; rows come in chunk order.
  template <typename Copy>
  void for_each_row(const std::vector<hsize_t>& origin, Copy copy) const {
    for_each_segment(origin, Selection{}, copy);
  }

  // The same for a selection: only the parts inside the selection's runs, with offsets into the
  // selected tensor (the runs' rows at their local offsets, dimensions as selected.dims()).
  template <typename Copy>
  void for_each_segment(const std::vector<hsize_t>& origin, const Selection& selection,
                        Copy copy) const {
    const std::size_t rank = dims.size();
    const std::size_t last = rank - 1;
    const std::vector<hsize_t> out_dims = selection.dims(dims);
    std::vector<hsize_t> extent(rank), index(rank, 0), at(rank);
    for (std::size_t d = 0; d < rank; ++d)
      extent[d] = std::min(chunk[d], dims[d] - origin[d]);
    // The pieces of the chunk's columns [origin, origin + extent) to copy: (first column in the
    // chunk, column in the output, columns).
    std::vector<std::array<hsize_t, 3>> pieces;
    if (selection.dim == int(last)) {
      for (const ShardRun& run : selection.runs) {
        const hsize_t from = std::max<hsize_t>(origin[last], hsize_t(run.global_offset));
        const hsize_t to =
            std::min<hsize_t>(origin[last] + extent[last], hsize_t(run.global_offset + run.length));
        if (from < to) {
          pieces.push_back({from - origin[last],
                            hsize_t(run.local_offset) + (from - hsize_t(run.global_offset)),
                            to - from});
        }
      }
    } else {
      pieces.push_back({0, origin[last], extent[last]});
    }
    for (;;) {
      bool inside = true;
      for (std::size_t d = 0; d < last; ++d) {
        at[d] = origin[d] + index[d];
        if (int(d) == selection.dim) inside = inside && selection.local(at[d], at[d]);
      }
      if (inside) {
        std::size_t out_row = 0, chunk_row = 0;
        for (std::size_t d = 0; d < last; ++d) {
          out_row = out_row * out_dims[d] + at[d];
          chunk_row = chunk_row * chunk[d] + index[d];
        }
        for (const auto& [in_chunk, in_out, columns] : pieces) {
          copy((out_row * out_dims[last] + in_out) * element_bytes,
               (chunk_row * chunk[last] + in_chunk) * element_bytes, columns * element_bytes);
        }
      }
      // The next row of the tile: dimensions before the last, last-but-one fastest.
      std::size_t d = last;
      while (d-- > 0) {
        if (++index[d] < extent[d]) break;
        index[d] = 0;
      }
      if (d == std::size_t(-1)) return;
    }
  }

  // Whether the chunk at `origin` holds anything the selection wants.
  bool selected(const std::vector<hsize_t>& origin, const Selection& selection) const {
    if (selection.dim < 0) return true;
    const auto d = static_cast<std::size_t>(selection.dim);
    const hsize_t end = std::min(origin[d] + chunk[d], dims[d]);
    for (const ShardRun& run : selection.runs) {
      if (run.length > 0 && hsize_t(run.global_offset) < end &&
          origin[d] < hsize_t(run.global_offset + run.length)) {
        return true;
      }
    }
    return false;
  }

  bool partial(const std::vector<hsize_t>& origin) const {
    for (std::size_t d = 0; d < dims.size(); ++d) {
      if (origin[d] + chunk[d] > dims[d]) return true;
    }
    return false;
  }
};

ChunkGrid grid_of(hid_t dataset, const std::vector<hsize_t>& dims, std::size_t element_bytes) {
  ChunkGrid grid{dims, std::vector<hsize_t>(dims.size()), element_bytes, element_bytes};
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (dims.empty() || !dcpl.valid() ||
      H5Pget_chunk(dcpl.get(), int(dims.size()), grid.chunk.data()) != int(dims.size())) {
    throw Error("cannot read the chunk shape" + hdf5_reason());
  }
  for (const hsize_t c : grid.chunk)
    grid.chunk_bytes *= c;
  return grid;
}

// Part of a chunk's bytes, from `in_chunk` on, and where a read puts them.
struct ChunkPiece {
  std::size_t in_chunk;
  char* to;
  std::size_t bytes;
};

// A chunk-sized buffer for the bytes of a chunk nobody wants, allocated (not cleared: it is
// only read into) when a chunk first has such bytes; most loads never need it.
struct Scratch {
  std::size_t bytes;
  std::unique_ptr<char[]> buffer;
  char* get() {
    if (!buffer) buffer = std::make_unique_for_overwrite<char[]>(bytes);
    return buffer.get();
  }
};

// Chunks are read and checksummed in windows of this many bytes, so the checksum reads what the
// read just wrote from the core's cache instead of from memory.
constexpr std::size_t kWindowBytes = std::size_t(256) << 10;

// The sec2 file descriptor of `dataset`'s file when that file is open read-only (a file open for
// writing may hold chunks in HDF5's buffers that are not in the file yet).
std::optional<int> read_only_descriptor(hid_t dataset) {
  Handle file(H5Iget_file_id(dataset), H5Fclose);
  unsigned intent = 0;
  if (!file.valid() || H5Fget_intent(file.get(), &intent) < 0 || (intent & H5F_ACC_RDWR)) {
    hdf5_error_detail();
    return std::nullopt;
  }
  return file_descriptor(dataset);
}

// Reads the chunk of `chunk_bytes` (> 0) stored at `address`, its data and then the 4-byte
// checksum into `written`, in one scattered read per window: `pieces` (sorted here; they must not
// overlap) into their destinations, the rest into `scratch`. Adds every data byte to `sum` in chunk
// order. nullopt, or why the read failed.
std::optional<std::string> read_chunk(int fd, haddr_t address, std::size_t chunk_bytes,
                                      std::vector<ChunkPiece>& pieces, Scratch& scratch,
                                      Fletcher32& sum, std::uint32_t& written) {
  std::sort(pieces.begin(), pieces.end(),
            [](const ChunkPiece& a, const ChunkPiece& b) { return a.in_chunk < b.in_chunk; });
  // The whole chunk in order, gaps into the scratch buffer, cut at window boundaries;
  // neighbours in memory within a window merged. starts: where each window's entries begin.
  std::vector<iovec> iov;
  std::vector<std::size_t> starts;
  std::size_t at = 0;  // bytes of the chunk placed so far
  const auto add = [&](char* to, std::size_t bytes) {
    while (bytes > 0) {
      const std::size_t take = std::min(bytes, kWindowBytes - at % kWindowBytes);
      if (at % kWindowBytes == 0) {
        starts.push_back(iov.size());
        iov.push_back({to, take});
      } else if (static_cast<char*>(iov.back().iov_base) + iov.back().iov_len == to) {
        iov.back().iov_len += take;
      } else {
        iov.push_back({to, take});
      }
      at += take;
      to += take;
      bytes -= take;
    }
  };
  for (const ChunkPiece& piece : pieces) {
    if (piece.in_chunk > at) add(scratch.get() + at, piece.in_chunk - at);
    add(piece.to, piece.bytes);
  }
  if (at < chunk_bytes) add(scratch.get() + at, chunk_bytes - at);
  starts.push_back(iov.size());
  unsigned char checksum[kChecksumBytes];
  std::vector<iovec> unread;  // transfer_fully advances it
  for (std::size_t w = 0; w + 1 < starts.size(); ++w) {
    unread.assign(iov.begin() + std::ptrdiff_t(starts[w]),
                  iov.begin() + std::ptrdiff_t(starts[w + 1]));
    if (w + 2 == starts.size()) unread.push_back({checksum, kChecksumBytes});
    if (std::string error = transfer_fully(fd, address + w * kWindowBytes, unread, false);
        !error.empty())
      return error;
    for (std::size_t i = starts[w]; i < starts[w + 1]; ++i)
      sum.add(iov[i].iov_base, iov[i].iov_len);
  }
  written = 0;
  for (std::size_t b = 0; b < kChecksumBytes; ++b)  // little-endian, as HDF5's filter stores it
    written |= std::uint32_t(checksum[b]) << (8 * b);
  return std::nullopt;
}

}  // namespace

bool direct_chunks(hid_t dataset, hid_t memory_type) {
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CHUNKED ||
      H5Pget_nfilters(dcpl.get()) != 1 || !has_checksum(dataset)) {
    return false;
  }
  Handle type(H5Dget_type(dataset), H5Tclose);
  if (!type.valid() || H5Tequal(type.get(), memory_type) <= 0) return false;
  return file_descriptor(dataset).has_value();
}

void write_chunks(hid_t dataset, const std::string& name, const std::vector<hsize_t>& dims,
                  std::size_t element_bytes, const void* data) {
  const ChunkGrid grid = grid_of(dataset, dims, element_bytes);
  std::vector<char> buffer(grid.chunk_bytes + kChecksumBytes);
  const char* tensor = static_cast<const char*>(data);
  for (const std::vector<hsize_t>& origin : grid.origins()) {
    // Zeros where an edge chunk reaches past the tensor, so the file never holds stale memory.
    if (grid.partial(origin)) std::memset(buffer.data(), 0, grid.chunk_bytes);
    // Rows come in chunk order: each is summed while it is gathered, and the padding between
    // and after them (edge chunks only) where it lies.
    Fletcher32 sum;
    std::size_t summed = 0;
    grid.for_each_row(origin, [&](std::size_t at, std::size_t in_chunk, std::size_t bytes) {
      sum.add(buffer.data() + summed, in_chunk - summed);
      sum.add_copy(buffer.data() + in_chunk, tensor + at, bytes);
      summed = in_chunk + bytes;
    });
    sum.add(buffer.data() + summed, grid.chunk_bytes - summed);
    const std::uint32_t checksum = sum.value();
    for (std::size_t b = 0; b < kChecksumBytes; ++b)  // little-endian, as HDF5's filter stores it
      buffer[grid.chunk_bytes + b] = static_cast<char>((checksum >> (8 * b)) & 0xff);
    if (H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, origin.data(), buffer.size(), buffer.data()) < 0) {
      throw Error("cannot write chunk " + chunk_origin_text(origin) + " of dataset '" + name + "'" +
                  hdf5_reason());
    }
  }
}

std::optional<std::string> read_chunks(hid_t dataset, const std::string& name,
                                       const std::vector<hsize_t>& dims, std::size_t element_bytes,
                                       void* out, int partition_dim,
                                       const std::vector<ShardRun>& runs) {
  const ChunkGrid grid = grid_of(dataset, dims, element_bytes);
  const Selection selection{partition_dim, partition_dim < 0 ? std::vector<ShardRun>{} : runs};
  if (selection.dim >= int(dims.size())) return std::nullopt;
  if (selection.dim >= 0) {
    // Each run must land inside the output and read rows no other run reads (a chunk's bytes go
    // to one place each); HDF5 checks the rest of a selection itself.
    const hsize_t rows = selection.dims(dims)[std::size_t(selection.dim)];
    std::vector<std::pair<hsize_t, hsize_t>> spans;
    for (const ShardRun& run : selection.runs) {
      if (run.local_offset < 0 || run.length < 0 || run.global_offset < 0 ||
          hsize_t(run.local_offset + run.length) > rows ||
          hsize_t(run.global_offset + run.length) > dims[std::size_t(selection.dim)]) {
        return std::nullopt;
      }
      if (run.length > 0) spans.emplace_back(run.global_offset, run.global_offset + run.length);
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].first < spans[i - 1].second) return std::nullopt;
    }
  }
  const std::optional<int> fd = read_only_descriptor(dataset);
  if (!fd) return std::nullopt;
  const std::size_t stored_bytes = grid.chunk_bytes + kChecksumBytes;
  Scratch scratch{grid.chunk_bytes, nullptr};
  char* const tensor = static_cast<char*>(out);
  std::vector<ChunkPiece> pieces;
  for (const std::vector<hsize_t>& origin : grid.origins()) {
    if (!grid.selected(origin, selection)) continue;
    unsigned filters = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(dataset, origin.data(), &filters, &address, &size) < 0 ||
        filters != 0 || size != stored_bytes || address == HADDR_UNDEF) {
      hdf5_error_detail();  // clears the stack; HDF5's own read will say what is wrong
      return std::nullopt;
    }
    // The chunk's bytes go straight where the output wants them and the rest (edge padding,
    // rows outside the selection, everything when only checking) into the scratch buffer.
    pieces.clear();
    if (tensor) {
      grid.for_each_segment(origin, selection,
                            [&](std::size_t offset, std::size_t in_chunk, std::size_t bytes) {
                              pieces.push_back({in_chunk, tensor + offset, bytes});
                            });
    }
    Fletcher32 sum;
    std::uint32_t written = 0;
    const std::optional<std::string> error =
        read_chunk(*fd, address, grid.chunk_bytes, pieces, scratch, sum, written);
    if (error)
      return damage_message(name) + " (chunk at " + chunk_origin_text(origin) + ": " + *error + ")";
    if (!fletcher32_accepts(written, sum.value())) {
      return "tensor '" + name +
             "' is damaged: its data fails the checksum written when it was saved (chunk at " +
             chunk_origin_text(origin) + ")";
    }
  }
  return std::string();
}

}  // namespace megatron::checkpoint::detail
