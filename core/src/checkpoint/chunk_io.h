// Direct chunk I/O: tensors in Fletcher32-filtered chunks (uint8 tensors; every tensor of
// format_version 1 files) written and read chunk by chunk with the checksum computed here
// instead of in HDF5's filter pipeline (Note [Direct chunk I/O]). Other tensors are contiguous
// with tile digests (tile_digests.h).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "megatron/nn/parameter.h"

namespace megatron::checkpoint::detail {

// Note [Direct chunk I/O]
//   The file format is unchanged: every chunk is stored as its data followed by the 4-byte
//   Fletcher32 checksum HDF5's filter would append, and the datasets still declare the filter,
//   so HDF5, h5py and the collective sharded saves read and write the same bytes. What changes
//   is who computes the checksum: HDF5 1.10's scalar loop ran at ~4 GB/s and was most of a
//   load's time (59% of `checkpoint_bench` Load in perf), and replacing the predefined filter is
//   refused by H5Zregister. So single-process saves write each chunk with H5Dwrite_chunk
//   (its rows gathered into the chunk buffer and summed in the same pass, Fletcher32::add_copy:
//   SIMD lanes, bit-identical to HDF5's value), and loads
//   (each rank opens the file alone, read-only) and `inspect --verify` read each chunk themselves:
//   H5Dget_chunk_info_by_coord gives its place in the file and one preadv per 256 KiB window
//   scatters its bytes straight into the rows of the tensor they belong to (a tile of a wide
//   matrix, a tensor-parallel slice), so no byte is copied twice, and the checksum is summed
//   over those pieces (Fletcher32, streaming) while the window is still in the core's cache.
//   Where that does not apply, HDF5 does the work as before: files opened over MPI-IO (HDF5 1.10
//   has no direct chunk I/O in parallel) or for writing, stored types that differ from the memory
//   type, other filters, chunks stored otherwise (filter skipped, another size). Loads read only
//   the chunks their slice touches, so a damaged chunk fails exactly the reads that touch it, as
//   through HDF5. Chunks start on 4 KiB boundaries of the file (align_large_objects in
//   hdf5_util.cpp): the kernel's copy is 4x slower between buffers not 32-byte aligned alike.
//   Measured and dropped (bench/RESULTS.md): mapping the file and checking each chunk while
//   copying it out (one pass, streaming stores) was 5-15% slower warm and 1.3-1.7x slower cold,
//   the page-table work of mapping small page-cache folios costing more than the pass it saved.

// Whether `dataset`'s chunks can be moved here: chunked with Fletcher32 as its only filter, its
// stored type byte-identical to `memory_type`, in a file opened with the sec2 driver.
bool direct_chunks(hid_t dataset, hid_t memory_type);

// Writes every chunk of a new dataset of `dims` from `data` (contiguous, row-major, elements of
// `element_bytes`), each followed by its checksum; edge chunks are padded with zeros. Throws
// megatron::Error naming the dataset when HDF5 cannot write a chunk.
void write_chunks(hid_t dataset, const std::string& name, const std::vector<hsize_t>& dims,
                  std::size_t element_bytes, const void* data);

// Reads every chunk, checks its checksum, and puts its elements into `out` (contiguous,
// row-major) or, with `out` null, only checks. With `partition_dim` >= 0 only the chunks holding
// the rows of `runs` along that dimension are read, and `out` holds just those rows, each run at
// its local offset (a tensor-parallel shard, as CheckpointReader::read_slice reads one). Returns ""
// when every chunk is intact, the "tensor '<name>' is damaged: ..." message naming the first bad
// chunk otherwise, or nullopt when a chunk is not stored as write_chunks stores it (its filter
// skipped, another size) or the file is open for writing: the caller then reads through HDF5.
std::optional<std::string> read_chunks(hid_t dataset, const std::string& name,
                                       const std::vector<hsize_t>& dims, std::size_t element_bytes,
                                       void* out, int partition_dim = -1,
                                       const std::vector<ShardRun>& runs = {});

}  // namespace megatron::checkpoint::detail
