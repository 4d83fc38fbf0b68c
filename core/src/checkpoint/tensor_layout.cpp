// Checkpoint tensor layout: stored dimensions, chunk tiles and the Fletcher32 filter.
#include "checkpoint/tensor_layout.h"

#include <fmt/format.h>
#include <cstdlib>
#include <string_view>

#include <algorithm>

#include "megatron/error.h"

namespace megatron::checkpoint::detail {

std::vector<hsize_t> stored_dims(const Shape& shape) {
  if (shape.empty()) return {1};
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

std::string chunk_origin_text(const std::vector<hsize_t>& origin) {
  std::string text;
  for (const hsize_t o : origin)
    text += (text.empty() ? "" : ", ") + std::to_string(o);
  return "[" + text + "]";
}

std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims, std::size_t element_bytes) {
  const hsize_t budget =
      std::max<hsize_t>(1, kChunkBytes / std::max<std::size_t>(1, element_bytes));
  std::vector<hsize_t> chunk(dims.size(), 1);
  const std::size_t last = dims.size() - 1;
  chunk[last] = std::min(dims[last], dims.size() > 1 ? std::min(kChunkColumns, budget) : budget);
  hsize_t elements = chunk[last];
  for (std::size_t d = last; d-- > 0;) {
    chunk[d] = std::clamp<hsize_t>(budget / elements, 1, dims[d]);
    elements *= chunk[d];
  }
  return chunk;
}

Handle tensor_creation_properties(const std::vector<hsize_t>& dims, std::size_t element_bytes) {
  const bool empty = std::find(dims.begin(), dims.end(), hsize_t(0)) != dims.end();
  if (!empty && !uses_tile_digests(element_bytes)) {
    return chunked_creation_properties(dims, element_bytes);
  }
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!dcpl.valid() || H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) < 0) {
    throw Error("cannot set up dataset properties" + hdf5_reason());
  }
  if (empty) return dcpl;
  // Allocated at creation, never filled: the data is written where H5Dget_offset says.
  if (H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS) < 0 ||
      H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY) < 0) {
    throw Error("cannot set up contiguous datasets" + hdf5_reason());
  }
  return dcpl;
}

Handle chunked_creation_properties(const std::vector<hsize_t>& dims, std::size_t element_bytes) {
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!dcpl.valid() || H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) < 0) {
    throw Error("cannot set up dataset properties" + hdf5_reason());
  }
  const std::vector<hsize_t> chunk = chunk_dims(dims, element_bytes);
  if (H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()) < 0 ||
      H5Pset_fletcher32(dcpl.get()) < 0) {
    throw Error("cannot set up checksummed chunks" + hdf5_reason());
  }
  return dcpl;
}

std::string missing_checksums(hid_t dataset, const std::string& name, int format_version) {
  if (format_version < 2 || has_checksum(dataset) || H5Dget_storage_size(dataset) == 0) return "";
  return "tensor '" + name + "' is damaged: its checksums are missing";
}

bool has_tile_digests(hid_t dataset) {
  return H5Aexists(dataset, kTileDigestsAttribute) > 0;
}

void write_tile_attributes(hid_t dataset, const TileGrid& grid,
                           const std::vector<std::uint32_t>& digests) {
  const auto write = [&](const char* name, hid_t file_type, hid_t memory_type, hsize_t count,
                         const void* values) {
    Handle space(H5Screate_simple(1, &count, nullptr), H5Sclose);
    Handle attribute(
        space.valid() ? H5Acreate2(dataset, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT)
                      : H5I_INVALID_HID,
        H5Aclose);
    if (!attribute.valid() || H5Awrite(attribute.get(), memory_type, values) < 0)
      throw Error(std::string("cannot write attribute '") + name + "'" + hdf5_reason());
  };
  const std::vector<std::uint64_t> tile(grid.tile.begin(), grid.tile.end());
  write(kTileShapeAttribute, H5T_STD_U64LE, H5T_NATIVE_UINT64, tile.size(), tile.data());
  write(kTileDigestsAttribute, H5T_STD_U32LE, H5T_NATIVE_UINT32, digests.size(), digests.data());
}

void rewrite_tile_digests(hid_t dataset, const std::vector<std::uint32_t>& digests) {
  Handle attribute(H5Aopen(dataset, kTileDigestsAttribute, H5P_DEFAULT), H5Aclose);
  Handle space(attribute.valid() ? H5Aget_space(attribute.get()) : H5I_INVALID_HID, H5Sclose);
  if (!space.valid() || H5Sget_simple_extent_npoints(space.get()) != hssize_t(digests.size()) ||
      H5Awrite(attribute.get(), H5T_NATIVE_UINT32, digests.data()) < 0)
    throw Error(std::string("cannot write attribute '") + kTileDigestsAttribute + "'" +
                hdf5_reason());
}

namespace {

// The values of a one-dimensional attribute of `count` integers; false when it is not that.
template <typename T>
bool read_array_attribute(hid_t dataset, const char* name, hid_t memory_type, hsize_t count,
                          std::vector<T>& out) {
  Handle attribute(H5Aopen(dataset, name, H5P_DEFAULT), H5Aclose);
  Handle space(attribute.valid() ? H5Aget_space(attribute.get()) : H5I_INVALID_HID, H5Sclose);
  Handle type(attribute.valid() ? H5Aget_type(attribute.get()) : H5I_INVALID_HID, H5Tclose);
  hsize_t stored = 0;
  if (!space.valid() || !type.valid() || H5Tget_class(type.get()) != H5T_INTEGER ||
      H5Sget_simple_extent_ndims(space.get()) != 1 ||
      H5Sget_simple_extent_dims(space.get(), &stored, nullptr) != 1 || stored != count) {
    hdf5_error_detail();  // clears the stack
    return false;
  }
  out.resize(std::size_t(count));
  if (H5Aread(attribute.get(), memory_type, out.data()) < 0) {
    hdf5_error_detail();
    return false;
  }
  return true;
}

}  // namespace

std::string read_tile_attributes(hid_t dataset, const std::string& name,
                                 const std::vector<hsize_t>& dims, std::size_t element_bytes,
                                 StoredTiles& out) {
  const std::string damaged = "tensor '" + name + "' is damaged: ";
  std::vector<std::uint64_t> tile;
  if (!read_array_attribute(dataset, kTileShapeAttribute, H5T_NATIVE_UINT64, dims.size(), tile))
    return damaged + "its attribute '" + kTileShapeAttribute + "' is not a tile shape of rank " +
           std::to_string(dims.size());
  // Tiles of at most the dataset and of at most kMaxTileBytes, so the digests' count is bounded
  // by what the data holds (a damaged shape cannot claim billions of tiles).
  double tile_bytes = double(element_bytes);
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (tile[d] == 0 || tile[d] > dims[d])
      return damaged + "its tile shape does not fit its shape (dimension " + std::to_string(d) +
             ")";
    tile_bytes *= double(tile[d]);
  }
  if (tile_bytes > double(kMaxTileBytes)) return damaged + "its tiles are too large";
  out.grid = TileGrid{dims, std::vector<hsize_t>(tile.begin(), tile.end()), element_bytes};
  if (!read_array_attribute(dataset, kTileDigestsAttribute, H5T_NATIVE_UINT32, out.grid.count(),
                            out.digests)) {
    return damaged + "its attribute '" + kTileDigestsAttribute + "' does not hold " +
           std::to_string(out.grid.count()) + " checksums";
  }
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  out.offset = H5Dget_offset(dataset);
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || out.offset == HADDR_UNDEF) {
    hdf5_error_detail();
    return damaged + "its data is not stored in one piece";
  }
  Handle file(H5Iget_file_id(dataset), H5Fclose);
  hsize_t file_bytes = 0;
  double data_bytes = double(element_bytes);
  for (const hsize_t d : dims)
    data_bytes *= double(d);
  if (!file.valid() || H5Fget_filesize(file.get(), &file_bytes) < 0 ||
      double(out.offset) + data_bytes > double(file_bytes)) {
    hdf5_error_detail();
    return fmt::format(
        "tensor '{}' is damaged: its {:.0f} bytes at offset {} reach past the "
        "end of the file ({} bytes)",
        name, data_bytes, out.offset, file_bytes);
  }
  return "";
}

namespace {

// How loads read whole tensors: as read_with_digests chooses, unless the test hook
// MEGATRON_TEST_WHOLE_READS names a method ("paired", "read_then_check" or "ring"), so tests can
// take each path whatever the page cache holds (Note [Paired reads]).
ReadMethod whole_read_method() {
  const char* hook = std::getenv("MEGATRON_TEST_WHOLE_READS");
  if (!hook) return ReadMethod::automatic;
  const std::string_view method(hook);
  if (method == "paired") return ReadMethod::paired;
  if (method == "read_then_check") return ReadMethod::read_then_check;
  if (method == "ring") return ReadMethod::ring;
  throw Error("MEGATRON_TEST_WHOLE_READS = '" + std::string(method) +
              "': expected 'paired', 'read_then_check' or 'ring'");
}

}  // namespace

std::string read_tiles(std::optional<int> fd, hid_t dataset, const std::string& name,
                       const std::vector<hsize_t>& dims, void* out, int partition_dim,
                       const std::vector<ShardRun>& runs, TransferHelper* helper,
                       std::shared_ptr<const void> owner) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  const std::size_t element_bytes = type.valid() ? H5Tget_size(type.get()) : 0;
  // The bytes are read as they lie: little-endian, as every tensor is stored.
  if (!uses_tile_digests(element_bytes) || element_bytes == 0 ||
      H5Tget_order(type.get()) != H5T_ORDER_LE) {
    hdf5_error_detail();
    return "tensor '" + name + "' is damaged: its element type does not go with its checksums";
  }
  StoredTiles tiles;
  if (std::string damage = read_tile_attributes(dataset, name, dims, element_bytes, tiles);
      !damage.empty()) {
    return damage;
  }
  if (!fd) throw Error("tensor '" + name + "': cannot check it (the file is not open with sec2)");
  return read_with_digests(*fd, tiles.offset, tiles.grid, tiles.digests, out, partition_dim, runs,
                           name, whole_read_method(), helper, std::move(owner));
}

std::optional<int> file_descriptor(hid_t object) {
  Handle file(H5Iget_file_id(object), H5Fclose);
  Handle fapl(file.valid() ? H5Fget_access_plist(file.get()) : H5I_INVALID_HID, H5Pclose);
  void* handle = nullptr;
  if (!fapl.valid() || H5Pget_driver(fapl.get()) != H5FD_SEC2 ||
      H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &handle) < 0 || !handle) {
    hdf5_error_detail();
    return std::nullopt;
  }
  return *static_cast<int*>(handle);  // sec2's handle is its descriptor
}

void write_layout_attributes(hid_t dataset, const Shape& shape) {
  if (shape.empty()) write_int_attribute(dataset, kScalarAttribute, 1);
}

bool has_checksum(hid_t dataset) {
  if (has_tile_digests(dataset)) return true;
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (!dcpl.valid()) return false;
  const int filters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0;
    std::size_t count = 0;
    unsigned config = 0;
    if (H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &count, nullptr, 0, nullptr, &config) ==
        H5Z_FILTER_FLETCHER32) {
      return true;
    }
  }
  return false;
}

bool stored_scalar(hid_t dataset) {
  return H5Aexists(dataset, kScalarAttribute) > 0;
}

}  // namespace megatron::checkpoint::detail
