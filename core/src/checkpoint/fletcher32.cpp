// Fletcher32 as HDF5 computes it, in 32 independent lanes so the compiler vectorises the sums.
//
// HDF5 adds 16-bit big-endian words w_1..w_n into sum1 and each running sum1 into sum2, folding
// both (x -> (x & 0xffff) + (x >> 16)) every 360 words and twice at the end. A fold keeps the
// value modulo 65535 and keeps it positive when it is positive, and the final value is at most
// 65535, so HDF5's result is a function of the exact sums S1 = sum w_i and S2 = sum (n - i + 1)
// w_i: 0 when they are 0 (all words zero), else their residue modulo 65535 written as 1..65535.
// That residue can be computed in any grouping, which is what lets the lanes below reproduce HDF5's
// value bit for bit (the test compares with HDF5's own filter output).
#include "checkpoint/fletcher32.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// Built for AVX-512, AVX2 and baseline x86-64 and picked by the CPU at load time (as the CPU row
// kernels are); clang builds (the fuzzers) take the baseline loop.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MEGATRON_FLETCHER_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MEGATRON_FLETCHER_CLONES
#endif

namespace megatron::checkpoint::detail {

namespace {

constexpr std::size_t kLanes = 32;
// Steps of kLanes words per block: lane sums start at 0 each block, so after 360 steps a lane's
// sum2 is at most 65535 * 360 * 361 / 2 < 2^32 (HDF5's own block length, for the same reason).
constexpr std::size_t kMaxSteps = 360;
constexpr std::uint64_t kModulus = 65535;

using LaneSums = Fletcher32Lanes;
static_assert(sizeof(LaneSums::s1) == kLanes * sizeof(std::uint32_t));

// What lane_steps does with the bytes besides summing them.
enum class Copy { none, cached, streaming };

// Half of the lanes' even (or odd) words as a GCC vector: one ymm with AVX2 and AVX-512, two
// xmm otherwise. Written as arrays indexed by k, GCC kept the sums in memory on AVX2, loading and
// storing each of them every step (15 GB/s from L1 on a Zen 3, a third of a page-cache load's
// time; bench/RESULTS.md); a 64-byte vector type did no better.
using Words8 = std::uint32_t __attribute__((vector_size(32)));

// Adds `steps` steps of kLanes consecutive words from `p` to the lanes: lane j's s1 += sum over
// steps t of v[t * kLanes + j], and each step adds the running s1 to s2 (so a block's s2 = sum of
// (steps - t) * v[t * kLanes + j] when the lanes start at 0), where v is each word read
// little-endian: HDF5's big-endian word w = 256 b0 + b1 and v = b0 + 256 b1 give 256 v = w
// modulo 65535, so the caller scales the sums by 256 instead of the loop swapping bytes. Words
// are taken in pairs from 32-bit loads (the low and high halves: even and odd lanes), which
// widens them with an AND and a shift instead of shuffles. With kCopy, also copies the bytes to
// `to` in the same pass (a save gathers a chunk's rows while it sums them; a load copies a
// tensor out of a mapping of the file, with streaming stores).
template <Copy kCopy>
[[gnu::always_inline]] inline void lane_steps(const unsigned char* p, unsigned char* to,
                                              std::size_t steps, LaneSums& lanes) {
  static_assert(std::endian::native == std::endian::little, "the pairs assume little-endian");
  static_assert(2 * sizeof(Words8) == 2 * kLanes);
  // Lanes 2k and 2k + 1 of the first half (k < 8) and of the second (the "b" vectors).
  Words8 even1a, odd1a, even2a, odd2a, even1b, odd1b, even2b, odd2b;
  for (std::size_t k = 0; k < 8; ++k) {
    even1a[k] = lanes.s1[2 * k];
    odd1a[k] = lanes.s1[2 * k + 1];
    even2a[k] = lanes.s2[2 * k];
    odd2a[k] = lanes.s2[2 * k + 1];
    even1b[k] = lanes.s1[16 + 2 * k];
    odd1b[k] = lanes.s1[16 + 2 * k + 1];
    even2b[k] = lanes.s2[16 + 2 * k];
    odd2b[k] = lanes.s2[16 + 2 * k + 1];
  }
  for (std::size_t t = 0; t < steps; ++t) {
    const unsigned char* q = p + t * 2 * kLanes;
    Words8 a, b;
    std::memcpy(&a, q, sizeof a);
    std::memcpy(&b, q + sizeof a, sizeof b);
    if constexpr (kCopy == Copy::cached) {
      std::memcpy(to + t * 2 * kLanes, &a, sizeof a);
      std::memcpy(to + t * 2 * kLanes + sizeof a, &b, sizeof b);
    }
#if defined(__SSE2__)
    if constexpr (kCopy == Copy::streaming) {  // `to` 16-byte aligned
      auto* d = reinterpret_cast<__m128i*>(to + t * 2 * kLanes);
      const auto* from = reinterpret_cast<const __m128i*>(q);
      for (int k = 0; k < 4; ++k)
        _mm_stream_si128(d + k, _mm_loadu_si128(from + k));
    }
#endif
    even1a += a & 0xffffu;
    odd1a += a >> 16;
    even1b += b & 0xffffu;
    odd1b += b >> 16;
    even2a += even1a;
    odd2a += odd1a;
    even2b += even1b;
    odd2b += odd1b;
  }
  for (std::size_t k = 0; k < 8; ++k) {
    lanes.s1[2 * k] = even1a[k];
    lanes.s1[2 * k + 1] = odd1a[k];
    lanes.s2[2 * k] = even2a[k];
    lanes.s2[2 * k + 1] = odd2a[k];
    lanes.s1[16 + 2 * k] = even1b[k];
    lanes.s1[16 + 2 * k + 1] = odd1b[k];
    lanes.s2[16 + 2 * k] = even2b[k];
    lanes.s2[16 + 2 * k + 1] = odd2b[k];
  }
}

MEGATRON_FLETCHER_CLONES
void lane_sums(const unsigned char* p, unsigned char* to, std::size_t steps, LaneSums& lanes,
               CopyStores stores) {
  if (!to) {
    lane_steps<Copy::none>(p, nullptr, steps, lanes);
    return;
  }
#if defined(__SSE2__)
  if (stores == CopyStores::streaming && reinterpret_cast<std::uintptr_t>(to) % 16 == 0) {
    lane_steps<Copy::streaming>(p, to, steps, lanes);
    _mm_sfence();  // visible to other threads before the caller's next release
    return;
  }
#endif
  lane_steps<Copy::cached>(p, to, steps, lanes);
}

// A block's own sums from its lanes: s1 = sum of its words, s2 = sum of (m - i) * w_i for its
// m words (0-based i), where word t * kLanes + j has weight kLanes * (steps - t) - j; s2 is
// scaled by 256 (the lanes summed the words read little-endian: lane_steps), s1 is not yet.
struct Block {
  std::uint64_t s1, s2, words;
};
Block block_of(const LaneSums& lanes, std::size_t steps) {
  std::uint64_t block1 = 0, lane2 = 0, lane_index = 0;
  for (std::size_t j = 0; j < kLanes; ++j) {
    block1 += lanes.s1[j];
    lane2 += lanes.s2[j];
    lane_index += j * std::uint64_t(lanes.s1[j]);
  }
  return {block1, (kLanes * lane2 - lane_index) % kModulus * 256, steps * kLanes};
}

}  // namespace

void Fletcher32::add_word(std::uint64_t word) {
  nonzero_ = nonzero_ || word != 0;
  a_ = (a_ + word) % kModulus;
  b_ = (b_ + a_) % kModulus;
}

void Fletcher32::add(const void* data, std::size_t bytes) {
  add_bytes(static_cast<const unsigned char*>(data), nullptr, bytes, CopyStores::cached);
}

void Fletcher32::add_copy(void* to, const void* from, std::size_t bytes) {
  add_bytes(static_cast<const unsigned char*>(from), static_cast<unsigned char*>(to), bytes,
            CopyStores::cached);
}

void Fletcher32::add_bytes(const unsigned char* p, unsigned char* to, std::size_t bytes,
                           CopyStores stores) {
  if (pending_ >= 0 && bytes > 0) {
    add_word((std::uint64_t(pending_) << 8) | p[0]);
    pending_ = -1;
    if (to) *to++ = *p;
    ++p;
    --bytes;
  }
  std::size_t words = bytes / 2;
  while (words >= kLanes) {
    const std::size_t steps = std::min(kMaxSteps, words / kLanes);
    LaneSums lanes{};
    lane_sums(p, to, steps, lanes, stores);
    const Block block = block_of(lanes, steps);
    add_block(block.s1, block.s2, block.words);
    p += 2 * steps * kLanes;
    if (to) to += 2 * steps * kLanes;
    words -= steps * kLanes;
  }
  if (to) std::memcpy(to, p, 2 * words + bytes % 2);
  for (; words > 0; --words, p += 2)
    add_word((std::uint64_t(p[0]) << 8) | p[1]);
  if (bytes % 2) pending_ = p[0];
}

void Fletcher32::add_rows(const void* from, std::size_t row_bytes, std::size_t stride,
                          std::size_t rows, void* to, std::size_t to_stride, CopyStores stores) {
  const auto* p = static_cast<const unsigned char*>(from);
  auto* q = static_cast<unsigned char*>(to);
  if (!Fletcher32Steps::fits(row_bytes) || pending_ >= 0) {
    for (std::size_t r = 0; r < rows; ++r)
      add_bytes(p + r * stride, q ? q + r * to_stride : nullptr, row_bytes, stores);
    return;
  }
  Fletcher32Steps steps(*this);
  for (std::size_t r = 0; r < rows; ++r)
    steps.add(p + r * stride, row_bytes, q ? q + r * to_stride : nullptr, stores);
  *this = steps.total();
}

void Fletcher32Steps::add(const void* from, std::size_t bytes, void* to, CopyStores stores) {
  const auto* p = static_cast<const unsigned char*>(from);
  auto* q = static_cast<unsigned char*>(to);
  // A block runs on across the pieces' ends (pieces of whole steps follow each other in the lanes
  // as in one piece) until it holds kMaxSteps steps.
  for (std::size_t left = bytes / (2 * kLanes); left > 0;) {
    const std::size_t take = std::min(kMaxSteps - steps_, left);
    lane_sums(p, q, take, lanes_, stores);
    steps_ += take;
    left -= take;
    p += take * 2 * kLanes;
    if (q) q += take * 2 * kLanes;
    if (steps_ == kMaxSteps) {
      const Block block = block_of(lanes_, steps_);
      done_.add_block(block.s1, block.s2, block.words);
      lanes_ = {};
      steps_ = 0;
    }
  }
}

Fletcher32 Fletcher32Steps::total() const {
  Fletcher32 out = done_;
  if (steps_ > 0) {
    const Block block = block_of(lanes_, steps_);
    out.add_block(block.s1, block.s2, block.words);
  }
  return out;
}

void Fletcher32::add_block(std::uint64_t block1, std::uint64_t block2, std::uint64_t words) {
  nonzero_ = nonzero_ || block1 != 0;
  b_ = (b_ + (words % kModulus) * a_ + block2) % kModulus;
  a_ = (a_ + block1 % kModulus * 256) % kModulus;
}

std::uint32_t Fletcher32::value() const {
  Fletcher32 last = *this;
  if (last.pending_ >= 0) last.add_word(std::uint64_t(last.pending_) << 8);
  if (!last.nonzero_) return 0;
  const std::uint32_t sum1 = last.a_ == 0 ? 65535u : std::uint32_t(last.a_);
  const std::uint32_t sum2 = last.b_ == 0 ? 65535u : std::uint32_t(last.b_);
  return (sum2 << 16) | sum1;
}

std::uint32_t fletcher32(const void* data, std::size_t bytes) {
  Fletcher32 sum;
  sum.add(data, bytes);
  return sum.value();
}

bool fletcher32_accepts(std::uint32_t stored, std::uint32_t computed) {
  const std::uint32_t swapped = ((computed & 0x00ff00ffu) << 8) | ((computed >> 8) & 0x00ff00ffu);
  return stored == computed || stored == swapped;
}

}  // namespace megatron::checkpoint::detail
