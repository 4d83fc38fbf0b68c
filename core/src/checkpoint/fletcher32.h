// HDF5's Fletcher32 chunk checksum, computed in SIMD lanes: the value HDF5's filter writes after
// each chunk, bit for bit, several times faster (Note [Direct chunk I/O] in chunk_io.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron::checkpoint::detail {

// The checksum of a run of bytes given in pieces of any length, in order: the value fletcher32()
// gives for their concatenation. Lets a chunk be checked where a scattered read put it, in the
// rows of the tensor, without gathering it first.
class Fletcher32 {
 public:
  void add(const void* data, std::size_t bytes);
  // add(from, bytes), also copying the bytes to `to` (not overlapping `from`) in the same pass
  // over them: one read of each byte instead of a copy and then a read of the copy.
  void add_copy(void* to, const void* from, std::size_t bytes);
  std::uint32_t value() const;
  // The sums themselves, modulo 65535 (0..65534): S1 = sum of the words w_0..w_{n-1} and
  // S2 = sum of (n - k) w_k, for pieces of even total length (tile digests combine them).
  std::uint64_t sum1() const { return a_; }
  std::uint64_t sum2() const { return b_; }

 private:
  void add_bytes(const unsigned char* from, unsigned char* to, std::size_t bytes);
  void add_word(std::uint64_t word);

  // S1 and S2 so far modulo 65535, and whether any word was not zero.
  std::uint64_t a_ = 0, b_ = 0;
  bool nonzero_ = false;
  // The first byte of a word a piece of odd length left unfinished (the next piece's first byte
  // completes it; value() pads it with a zero byte, as HDF5 pads an odd length).
  int pending_ = -1;
};

// The checksum HDF5's H5_checksum_fletcher32 gives for `bytes` bytes at `data` (16-bit big-endian
// words, both sums folded modulo 65535 as HDF5 folds them; 0 for no bytes).
std::uint32_t fletcher32(const void* data, std::size_t bytes);

// Whether the 4 bytes HDF5 stored after a chunk (little-endian) accept a chunk whose checksum is
// `computed`: HDF5 also accepts the value with each 16-bit half byte-swapped, which HDF5 before
// 1.6.3 wrote on little-endian machines.
bool fletcher32_accepts(std::uint32_t stored, std::uint32_t computed);

}  // namespace megatron::checkpoint::detail
