// A faster HDF5 Fletcher32: HDF5's loop adds one word at a time into a running pair of sums
// (a serial dependency, ~2 bytes per cycle). Here each 360-word block's sums come from eight
// independent lanes of plain additions, which compilers vectorise, then the block's exact sums
// are combined and folded exactly as HDF5 folds them, so the result is bit for bit HDF5's.
// (Why not HDF5's function: it is internal to the library, and its speed is the point.)
#include "checkpoint/fletcher32.h"

#include <hdf5.h>

#include <cstring>

namespace megatron::checkpoint::detail {

namespace {

constexpr std::size_t kBlockWords = 360;  // HDF5's fold interval: no uint32 overflow within it
constexpr std::size_t kLanes = 8;

inline std::uint32_t word_at(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 8) | std::uint32_t(p[1]);
}

inline std::uint32_t fold(std::uint32_t x) {
  return (x & 0xffff) + (x >> 16);
}

// The exact sums of `n` words (n <= 360) added to (sum1, sum2) as HDF5's inner loop does:
// sum1 += w_i; sum2 += sum1 for each word. With lanes: a_j = sum of the words at j mod 8,
// b_j = sum over steps of a_j's running value; for n = 8m words the weight of word i in
// sum2 is n - i = 8 (m - k) - j for i = 8k + j, so sum2 gains 8 * sum(b) - sum(j * a_j).
void add_block(const std::uint8_t* p, std::size_t n, std::uint32_t& sum1, std::uint32_t& sum2) {
  const std::size_t steps = n / kLanes;
  std::uint32_t a[kLanes] = {}, b[kLanes] = {};
  for (std::size_t k = 0; k < steps; ++k) {
    const std::uint8_t* q = p + 2 * kLanes * k;
    for (std::size_t j = 0; j < kLanes; ++j) {
      a[j] += word_at(q + 2 * j);
      b[j] += a[j];
    }
  }
  std::uint64_t lane_sum = 0, weighted = 0, running = 0;
  for (std::size_t j = 0; j < kLanes; ++j) {
    lane_sum += a[j];
    running += b[j];
    weighted += std::uint64_t(j) * a[j];
  }
  const std::uint64_t head = steps * kLanes;
  // Exact values; HDF5's block bound keeps them below 2^32, so uint32 arithmetic agrees.
  std::uint64_t s1 = sum1, s2 = sum2;
  s2 += head * s1 + kLanes * running - weighted;
  s1 += lane_sum;
  for (std::size_t i = head; i < n; ++i) {
    s1 += word_at(p + 2 * i);
    s2 += s1;
  }
  sum1 = static_cast<std::uint32_t>(s1);
  sum2 = static_cast<std::uint32_t>(s2);
}

// The filter: forward appends the checksum, reverse checks and strips it (HDF5's semantics).
size_t fletcher32_filter(unsigned flags, size_t, const unsigned[], size_t nbytes, size_t* buf_size,
                         void** buf) {
  auto* data = static_cast<std::uint8_t*>(*buf);
  if (flags & H5Z_FLAG_REVERSE) {
    if (nbytes < 4) return 0;
    const size_t length = nbytes - 4;
    if (!(flags & H5Z_FLAG_SKIP_EDC)) {
      const std::uint8_t* c = data + length;
      const std::uint32_t stored = std::uint32_t(c[0]) | (std::uint32_t(c[1]) << 8) |
                                   (std::uint32_t(c[2]) << 16) | (std::uint32_t(c[3]) << 24);
      const std::uint32_t sum = fletcher32(data, length);
      // HDF5 1.6.0-1.6.2 stored the sum with the bytes of each half swapped.
      const std::uint32_t swapped = ((sum & 0x00ff00ffu) << 8) | ((sum & 0xff00ff00u) >> 8);
      if (stored != sum && stored != swapped) {
        H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_STORAGE, H5E_READERROR,
                 "data error detected by Fletcher32 checksum");
        return 0;
      }
    }
    return length;
  }
  const std::uint32_t sum = fletcher32(data, nbytes);
  if (*buf_size < nbytes + 4) {
    void* grown = H5resize_memory(*buf, nbytes + 4);
    if (!grown) return 0;
    *buf = grown;
    *buf_size = nbytes + 4;
    data = static_cast<std::uint8_t*>(grown);
  }
  const std::uint8_t tail[4] = {std::uint8_t(sum), std::uint8_t(sum >> 8), std::uint8_t(sum >> 16),
                                std::uint8_t(sum >> 24)};
  std::memcpy(data + nbytes, tail, 4);
  return nbytes + 4;
}

}  // namespace

std::uint32_t fletcher32(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::size_t words = bytes / 2;
  std::uint32_t sum1 = 0, sum2 = 0;
  while (words) {
    const std::size_t n = words > kBlockWords ? kBlockWords : words;
    add_block(p, n, sum1, sum2);
    p += 2 * n;
    words -= n;
    sum1 = fold(sum1);
    sum2 = fold(sum2);
  }
  if (bytes % 2) {
    sum1 += std::uint32_t(*p) << 8;
    sum2 += sum1;
    sum1 = fold(sum1);
    sum2 = fold(sum2);
  }
  sum1 = fold(sum1);
  sum2 = fold(sum2);
  return (sum2 << 16) | sum1;
}

void use_fast_fletcher32_filter() {
  static const H5Z_class2_t kFilter = {H5Z_CLASS_T_VERS,
                                       H5Z_FILTER_FLETCHER32,
                                       1,
                                       1,
                                       "fletcher32 (megatron-app, vectorised)",
                                       nullptr,
                                       nullptr,
                                       fletcher32_filter};
  static const bool registered = H5Zregister(&kFilter) >= 0;
  (void)registered;
}

}  // namespace megatron::checkpoint::detail
