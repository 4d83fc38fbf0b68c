// HDF5's Fletcher32 chunk checksum, computed in SIMD lanes: the value HDF5's filter writes after
// each chunk, bit for bit, several times faster (Note [Direct chunk I/O] in chunk_io.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron::checkpoint::detail {

// The checksum HDF5's H5_checksum_fletcher32 gives for `bytes` bytes at `data` (16-bit big-endian
// words, both sums folded modulo 65535 as HDF5 folds them; 0 for no bytes).
std::uint32_t fletcher32(const void* data, std::size_t bytes);

// Whether the 4 bytes HDF5 stored after a chunk (little-endian) accept a chunk whose checksum is
// `computed`: HDF5 also accepts the value with each 16-bit half byte-swapped, which HDF5 before
// 1.6.3 wrote on little-endian machines.
bool fletcher32_accepts(std::uint32_t stored, std::uint32_t computed);

}  // namespace megatron::checkpoint::detail
