// HDF5's Fletcher32 checksum, computed several times faster than HDF5's own loop and registered
// in its place, bit for bit the same, so files stay readable and checkable by any HDF5 (h5py,
// h5dump) while checkpoint saves and loads spend less time checksumming (bench/RESULTS.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron::checkpoint::detail {

// H5_checksum_fletcher32's value for `bytes` bytes at `data` (big-endian 16-bit words, sums
// folded every 360 words, a trailing odd byte as the high half of a word).
std::uint32_t fletcher32(const void* data, std::size_t bytes);

// Replaces HDF5's Fletcher32 filter (H5Z_FILTER_FLETCHER32) for this process with one that uses
// fletcher32() and the same stored form (the checksum appended little endian; a read accepts the
// byte-swapped form HDF5 1.6 wrote too). Idempotent; the caller holds the HDF5 lock.
void use_fast_fletcher32_filter();

}  // namespace megatron::checkpoint::detail
