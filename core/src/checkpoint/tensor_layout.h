// How a tensor is laid out in a checkpoint file: contiguous with a checksum per tile (Note [Tile
// digests]), or chunks carrying HDF5's Fletcher32 checksum (uint8 tensors; format_version 1), so
// every read of any slice verifies the tiles or chunks it touches (Note [Checksums]).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/hdf5_util.h"
#include "checkpoint/tile_digests.h"
#include "megatron/tensor/tensor.h"

namespace megatron::checkpoint::detail {

class TransferHelper;

// Note [Checksums]
//   Why checksums per tile and not one digest attribute per tensor: a sharded save writes each
//   tensor from several ranks and a load at another layout reads a different cut of it, so a
//   whole-tensor digest could only be computed or checked by someone holding the whole tensor.
//   Per-tile checksums are computed as the data is written (each rank sums its own runs and an
//   all-reduce adds them up: Fletcher32 is linear) and checked on every read of that tile,
//   whoever reads it and whichever slice they want. Tiles are row-major blocks of about
//   kChunkBytes (the last dimension cut at kChunkColumns), so a tensor-parallel slice along either
//   dimension reads little beyond itself. Format version 1 stored the same tiles as HDF5 chunks
//   with HDF5's Fletcher32 filter (which h5py and h5dump check too); chunks cost 30-50% on reads
//   and 14-26% CPU on writes by themselves (bench/RESULTS.md), so version 2 keeps the data
//   contiguous and the checksums in attributes (Note [Tile digests]); uint8 tensors, whose runs
//   may start mid-word, still use the filter. A scalar is stored as a [1] dataset with attribute
//   `scalar` = 1; a tensor without elements has no data to check. Fletcher32's limits: 32 bits,
//   and it cannot tell a 16-bit word 0x0000 from 0xFFFF (an all-ones overwrite of zeros, or
//   zeroing of 0xFFFF words, is not detected); flipped bits, zeroed pages of weights, torn or
//   misplaced writes are.
inline constexpr std::size_t kChunkBytes = std::size_t(1) << 20;
inline constexpr hsize_t kChunkColumns = 1024;
inline constexpr const char* kScalarAttribute = "scalar";

// The dataset dimensions a tensor of `shape` is stored with ([1] for a scalar).
std::vector<hsize_t> stored_dims(const Shape& shape);
// A chunk's origin as messages name it: "[256, 1024]".
std::string chunk_origin_text(const std::vector<hsize_t>& origin);
// The chunk of a dataset of `dims` (none of them zero).
std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims, std::size_t element_bytes);

// The tiles a new tensor of `dims` is checksummed in (Note [Tile digests]): chunk_dims' shape.
inline TileGrid tile_grid_for(const std::vector<hsize_t>& dims, std::size_t element_bytes) {
  return TileGrid{dims, chunk_dims(dims, element_bytes), element_bytes};
}
// Dataset creation properties, fill values never written: a contiguous dataset allocated at
// creation for tile digests (Note [Tile digests]), Fletcher32-filtered chunks for 1-byte elements.
Handle tensor_creation_properties(const std::vector<hsize_t>& dims, std::size_t element_bytes);
// Fletcher32-filtered chunks of chunk_dims (uint8 tensors; every tensor of format_version 1).
Handle chunked_creation_properties(const std::vector<hsize_t>& dims, std::size_t element_bytes);
// "tensor '<name>' is damaged: its checksums are missing" for a dataset holding data without
// checksums in a file whose format_version always writes them (2 on); "" otherwise.
std::string missing_checksums(hid_t dataset, const std::string& name, int format_version);
// Whether the dataset carries tile digests.
bool has_tile_digests(hid_t dataset);
// Writes the tile shape and digests of a dataset (collective under MPI-IO: every rank, the same).
void write_tile_attributes(hid_t dataset, const TileGrid& grid,
                           const std::vector<std::uint32_t>& digests);
// Replaces the digests written by write_tile_attributes with `digests` (as many): a save that
// sums beside its writes creates the attributes with the dataset, so they lie in its header,
// and fills them in once the sums are done.
void rewrite_tile_digests(hid_t dataset, const std::vector<std::uint32_t>& digests);
// A dataset's tiles, their digests and where its data starts in the file.
struct StoredTiles {
  TileGrid grid;
  std::vector<std::uint32_t> digests;
  haddr_t offset = HADDR_UNDEF;
};
// Tiles larger than this are damage (ours are about kChunkBytes).
inline constexpr std::size_t kMaxTileBytes = std::size_t(64) << 20;
// Reads and checks the tile attributes of a dataset of `dims`; "" or the damage message.
std::string read_tile_attributes(hid_t dataset, const std::string& name,
                                 const std::vector<hsize_t>& dims, std::size_t element_bytes,
                                 StoredTiles& out);
// Reads (into `out`, of the dataset's own element type, or with `out` null only checks) the
// whole tensor or, with partition_dim >= 0, the rows of `runs` along it (validated by the caller),
// checking every tile read (Note [Tile digests]); "" or the damage message. With `helper`, a
// whole tensor is read on two threads (Note [Paired reads]); with `owner` too (keeping `out`
// alive), its check may be left to the helper, whose finish() then gives the verdict. `fd` is
// file_descriptor() of the dataset's file (none: the tensor cannot be checked, an Error).
std::string read_tiles(std::optional<int> fd, hid_t dataset, const std::string& name,
                       const std::vector<hsize_t>& dims, void* out, int partition_dim = -1,
                       const std::vector<ShardRun>& runs = {}, TransferHelper* helper = nullptr,
                       std::shared_ptr<const void> owner = nullptr);
// The descriptor of the file `object` lies in when it is open with the sec2 driver. Asked once
// per file: HDF5 copies the file's access properties to tell (~30 us, 1.3 ms of a 512 MiB load
// when asked per tensor).
std::optional<int> file_descriptor(hid_t object);
// Writes the attributes that go with the layout (the scalar marker) on a new dataset.
void write_layout_attributes(hid_t dataset, const Shape& shape);
// Whether the dataset's data carries checksums: tile digests or chunks with the Fletcher32 filter.
bool has_checksum(hid_t dataset);
// Whether a dataset holds a scalar tensor (stored as [1]).
bool stored_scalar(hid_t dataset);

// "tensor '<name>' is damaged: ..." after a failed read of it, from HDF5's error stack (a
// checksum mismatch, or data that cannot be read back); clears the stack.
std::string damage_message(const std::string& name);
// "tensor '<name>' is damaged: ..." when the dataset's shape needs more bytes than the file holds
// or than are stored for it (chunks missing); empty otherwise. Checked before reading, so a
// damaged dataspace or chunk index cannot make a read allocate or scan what the file never held
// (fuzz/fuzz_checkpoint: a chunk index claiming a 4 GiB chunk made HDF5 allocate that much).
std::string size_damage(hid_t dataset, const std::string& name);

}  // namespace megatron::checkpoint::detail
