// Direct chunk I/O of whole tensors: tiles copied between the tensor and a chunk buffer, the
// Fletcher32 checksum appended on write and checked on read (Note [Direct chunk I/O]).
#include "checkpoint/chunk_io.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "checkpoint/fletcher32.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_layout.h"
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
  // contiguous, the chunk buffer full chunk size, both row-major.
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

  // Where the chunk at `origin` starts in the tensor, in bytes, when it is one contiguous run of
  // it (whole rows of every dimension after the first, and inside the first); nullopt otherwise.
  std::optional<std::size_t> contiguous_at(const std::vector<hsize_t>& origin) const {
    for (std::size_t d = 1; d < dims.size(); ++d) {
      if (chunk[d] != dims[d]) return std::nullopt;
    }
    if (origin[0] + chunk[0] > dims[0]) return std::nullopt;
    return origin[0] * (chunk_bytes / chunk[0]);
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

std::string where(const std::vector<hsize_t>& origin) {
  std::string text;
  for (const hsize_t o : origin)
    text += (text.empty() ? "" : ", ") + std::to_string(o);
  return "[" + text + "]";
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
  Handle file(H5Iget_file_id(dataset), H5Fclose);
  Handle fapl(file.valid() ? H5Fget_access_plist(file.get()) : H5I_INVALID_HID, H5Pclose);
  return fapl.valid() && H5Pget_driver(fapl.get()) == H5FD_SEC2;
}

void write_chunks(hid_t dataset, const std::string& name, const std::vector<hsize_t>& dims,
                  std::size_t element_bytes, const void* data) {
  const ChunkGrid grid = grid_of(dataset, dims, element_bytes);
  std::vector<char> buffer(grid.chunk_bytes + kChecksumBytes);
  const char* tensor = static_cast<const char*>(data);
  for (const std::vector<hsize_t>& origin : grid.origins()) {
    // Zeros where an edge chunk reaches past the tensor, so the file never holds stale memory.
    if (grid.partial(origin)) std::memset(buffer.data(), 0, grid.chunk_bytes);
    grid.for_each_row(origin, [&](std::size_t at, std::size_t in_chunk, std::size_t bytes) {
      std::memcpy(buffer.data() + in_chunk, tensor + at, bytes);
    });
    const std::uint32_t checksum = fletcher32(buffer.data(), grid.chunk_bytes);
    for (std::size_t b = 0; b < kChecksumBytes; ++b)  // little-endian, as HDF5's filter stores it
      buffer[grid.chunk_bytes + b] = static_cast<char>((checksum >> (8 * b)) & 0xff);
    if (H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, origin.data(), buffer.size(), buffer.data()) < 0) {
      throw Error("cannot write chunk " + where(origin) + " of dataset '" + name + "'" +
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
    // Each run must land inside the output; HDF5 checks the rest of a selection itself.
    const hsize_t rows = selection.dims(dims)[std::size_t(selection.dim)];
    for (const ShardRun& run : selection.runs) {
      if (run.local_offset < 0 || run.length < 0 || run.global_offset < 0 ||
          hsize_t(run.local_offset + run.length) > rows ||
          hsize_t(run.global_offset + run.length) > dims[std::size_t(selection.dim)]) {
        return std::nullopt;
      }
    }
  }
  const std::size_t stored_bytes = grid.chunk_bytes + kChecksumBytes;
  std::size_t tensor_bytes = element_bytes;
  for (const hsize_t d : dims)
    tensor_bytes *= d;
  std::vector<char> buffer(stored_bytes);
  for (const std::vector<hsize_t>& origin : grid.origins()) {
    if (!grid.selected(origin, selection)) continue;
    unsigned filters = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(dataset, origin.data(), &filters, &address, &size) < 0 ||
        filters != 0 || size != stored_bytes) {
      hdf5_error_detail();  // clears the stack; HDF5's own read will say what is wrong
      return std::nullopt;
    }
    // A chunk that is a contiguous run of the tensor, with 4 bytes of the tensor after it, is
    // read in place (those 4 bytes, which receive the checksum, are put back after), saving the
    // copy out of the buffer.
    const std::optional<std::size_t> at =
        out && selection.dim < 0 ? grid.contiguous_at(origin) : std::nullopt;
    const bool in_place = at && *at + stored_bytes <= tensor_bytes;
    char* chunk = in_place ? static_cast<char*>(out) + *at : buffer.data();
    char after[kChecksumBytes];
    if (in_place) std::memcpy(after, chunk + grid.chunk_bytes, kChecksumBytes);
    std::uint32_t read_filters = 0;
    const bool read = H5Dread_chunk(dataset, H5P_DEFAULT, origin.data(), &read_filters, chunk) >= 0;
    std::uint32_t written = 0;
    for (std::size_t b = 0; b < kChecksumBytes; ++b)
      written |= std::uint32_t(static_cast<unsigned char>(chunk[grid.chunk_bytes + b])) << (8 * b);
    if (in_place) std::memcpy(chunk + grid.chunk_bytes, after, kChecksumBytes);
    if (!read) return damage_message(name) + " (chunk at " + where(origin) + ")";
    if (!fletcher32_accepts(written, fletcher32(chunk, grid.chunk_bytes))) {
      return "tensor '" + name +
             "' is damaged: its data fails the checksum written when it was saved (chunk at " +
             where(origin) + ")";
    }
    if (!out || in_place) continue;
    grid.for_each_segment(
        origin, selection, [&](std::size_t offset, std::size_t in_chunk, std::size_t bytes) {
          std::memcpy(static_cast<char*>(out) + offset, buffer.data() + in_chunk, bytes);
        });
  }
  return std::string();
}

}  // namespace megatron::checkpoint::detail
