// How a tensor is laid out in a checkpoint file: chunked, each chunk carrying HDF5's Fletcher32
// checksum, so every read of any slice verifies the chunks it touches (Note [Checksums]).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <string>
#include <vector>

#include "checkpoint/hdf5_util.h"
#include "megatron/tensor/tensor.h"

namespace megatron::checkpoint::detail {

// Note [Checksums]
//   Why Fletcher32 on chunks and not one digest attribute per tensor: a sharded save writes each
//   tensor from several ranks and a load at another layout reads a different cut of it, so a
//   whole-tensor digest could only be computed or checked by someone holding the whole tensor.
//   Per-chunk checksums are computed as each chunk is written (by HDF5's filter in collective
//   writes, which merge the pieces several ranks give one chunk; by chunk_io.h's direct chunk
//   I/O in single-process saves) and checked on every read of that chunk, whoever reads it and
//   whichever slice they want. Chunks are row-major tiles of about kChunkBytes (the
//   last dimension cut at kChunkColumns), so a tensor-parallel slice along either dimension reads
//   little beyond itself. A scalar is stored as a [1] dataset with attribute `scalar` = 1 (HDF5
//   cannot chunk a scalar dataspace); a tensor without elements has no data to check.
//   Fletcher32 is HDF5's built-in checksum, so h5py, h5dump and any HDF5 1.8+ reader check it
//   too, with no plugin. Its limits: 32 bits, and it cannot tell a 16-bit word 0x0000 from 0xFFFF
//   (an all-ones overwrite of zeros, or zeroing of 0xFFFF words, is not detected); flipped bits,
//   zeroed pages of weights, torn or misplaced writes are.
inline constexpr std::size_t kChunkBytes = std::size_t(1) << 20;
inline constexpr hsize_t kChunkColumns = 1024;
inline constexpr const char* kScalarAttribute = "scalar";

// The dataset dimensions a tensor of `shape` is stored with ([1] for a scalar).
std::vector<hsize_t> stored_dims(const Shape& shape);
// A chunk's origin as messages name it: "[256, 1024]".
std::string chunk_origin_text(const std::vector<hsize_t>& origin);
// The chunk of a dataset of `dims` (none of them zero).
std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims, std::size_t element_bytes);
// Dataset creation properties: checksummed chunks for data, fill values never written.
Handle tensor_creation_properties(const std::vector<hsize_t>& dims, std::size_t element_bytes);
// Writes the attributes that go with the layout (the scalar marker) on a new dataset.
void write_layout_attributes(hid_t dataset, const Shape& shape);
// Whether the dataset's chunks carry the Fletcher32 filter.
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
