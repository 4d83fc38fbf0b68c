// HDF5's Fletcher32 chunk checksum, computed in SIMD lanes: the value HDF5's filter writes after
// each chunk, bit for bit, several times faster (Note [Direct chunk I/O] in chunk_io.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron::checkpoint::detail {

// The lanes of one block of Fletcher32 steps (64 bytes, 32 words, a step), fletcher32.cpp.
struct Fletcher32Lanes {
  std::uint32_t s1[32];
  std::uint32_t s2[32];
};

// How a sum's copy of the bytes stores them. `streaming`: non-temporal stores, which skip reading
// each destination line before writing it and leave the caches alone, for a load's copy into a
// tensor not read again soon (a third less memory traffic: a one-thread page-cache load took 5%
// less time, bench/RESULTS.md); falls back to `cached` where the destination is not 16-byte
// aligned, or off x86. `cached`: ordinary stores, for a copy read again soon (a chunk gathered
// for its write).
enum class CopyStores { cached, streaming };

// The checksum of a run of bytes given in pieces of any length, in order: the value fletcher32()
// gives for their concatenation. Lets a chunk be checked where a scattered read put it, in the
// rows of the tensor, without gathering it first.
class Fletcher32 {
 public:
  void add(const void* data, std::size_t bytes);
  // add(from, bytes), also copying the bytes to `to` (not overlapping `from`) in the same pass
  // over them: one read of each byte instead of a copy and then a read of the copy.
  void add_copy(void* to, const void* from, std::size_t bytes);
  // add() of `rows` pieces of `row_bytes` each, the piece r at from + r * stride, in order (and
  // with `to`, add_copy() of each to to + r * to_stride): the rows of a tile in a tensor. Rows
  // of whole 64-byte steps are summed as one piece, folded once per block instead of per row.
  void add_rows(const void* from, std::size_t row_bytes, std::size_t stride, std::size_t rows,
                void* to = nullptr, std::size_t to_stride = 0,
                CopyStores stores = CopyStores::cached);
  std::uint32_t value() const;
  // The sums themselves, modulo 65535 (0..65534): S1 = sum of the words w_0..w_{n-1} and
  // S2 = sum of (n - k) w_k, for pieces of even total length (tile digests combine them).
  std::uint64_t sum1() const { return a_; }
  std::uint64_t sum2() const { return b_; }

 private:
  friend class Fletcher32Steps;
  void add_bytes(const unsigned char* from, unsigned char* to, std::size_t bytes,
                 CopyStores stores);
  void add_word(std::uint64_t word);
  // Adds a block of `words` words whose own sums are s1 (unscaled) and s2 (scaled by 256).
  void add_block(std::uint64_t s1, std::uint64_t s2, std::uint64_t words);

  // S1 and S2 so far modulo 65535, and whether any word was not zero.
  std::uint64_t a_ = 0, b_ = 0;
  bool nonzero_ = false;
  // The first byte of a word a piece of odd length left unfinished (the next piece's first byte
  // completes it; value() pads it with a zero byte, as HDF5 pads an odd length).
  int pending_ = -1;
};

// Fletcher32 of pieces of whole 64-byte steps added one at a time, as a tile's rows come in file
// order between other tiles' rows: the block's lanes stay open from piece to piece and are
// folded once per block of steps, not once per piece (a fold costs about what summing 4 KiB
// does).
class Fletcher32Steps {
 public:
  // Whether a piece of `bytes` can be added: whole steps.
  static bool fits(std::size_t bytes) { return bytes % 64 == 0; }
  // Goes on from `start` (which has no odd byte pending).
  explicit Fletcher32Steps(const Fletcher32& start = {}) : done_(start) {}
  // Adds `bytes` (fits) at `from`, copying them to `to` when not null.
  void add(const void* from, std::size_t bytes, void* to = nullptr,
           CopyStores stores = CopyStores::cached);
  // The sums of everything added.
  Fletcher32 total() const;

 private:
  Fletcher32 done_;
  Fletcher32Lanes lanes_{};
  std::size_t steps_ = 0;  // in the open block
};

// The checksum HDF5's H5_checksum_fletcher32 gives for `bytes` bytes at `data` (16-bit big-endian
// words, both sums folded modulo 65535 as HDF5 folds them; 0 for no bytes).
std::uint32_t fletcher32(const void* data, std::size_t bytes);

// Whether the 4 bytes HDF5 stored after a chunk (little-endian) accept a chunk whose checksum is
// `computed`: HDF5 also accepts the value with each 16-bit half byte-swapped, which HDF5 before
// 1.6.3 wrote on little-endian machines.
bool fletcher32_accepts(std::uint32_t stored, std::uint32_t computed);

}  // namespace megatron::checkpoint::detail
