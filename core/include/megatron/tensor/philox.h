// Philox4x32-10, a counter-based RNG: the numbers depend only on (seed, counter), so every backend
// and every thread count draws the same values for the same element.
#pragma once

#include <cmath>
#include <cstdint>

#include "megatron/tensor/hd.h"

namespace megatron {

struct Philox4 {
  std::uint32_t v[4];
};

namespace detail {
MEGATRON_HD void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}
}  // namespace detail

// Philox4x32 with 10 rounds on a 128-bit counter and a 64-bit key (Salmon et al., SC'11).
MEGATRON_HD Philox4 philox4x32_10(Philox4 counter, std::uint32_t k0, std::uint32_t k1) {
  std::uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    detail::mulhilo(0xD2511F53u, c0, hi0, lo0);
    detail::mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// The block for a 64-bit counter (high counter words zero) under a 64-bit seed.
MEGATRON_HD Philox4 philox4x32(std::uint64_t seed, std::uint64_t counter) {
  return philox4x32_10({{static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32), 0u, 0u}},
                       static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Uniform in (0, 1]: never 0, so log() is safe for Box-Muller.
MEGATRON_HD float philox_uniform(std::uint32_t word) {
  return (static_cast<float>(word >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

// Element i of the stream (seed, offset): word i % 4 of block (offset + i) / 4.
MEGATRON_HD float philox_uniform_at(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  const std::uint64_t index = offset + i;
  return philox_uniform(philox4x32(seed, index >> 2).v[index & 3]);
}

// Standard normal for element i: Box-Muller on two words of block (offset + i) / 2 (words 0-1 for
// even indices, 2-3 for odd), so each element needs one block and no neighbour.
MEGATRON_HD float philox_normal_at(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  const std::uint64_t index = offset + i;
  const Philox4 r = philox4x32(seed, index >> 1);
  const unsigned w = static_cast<unsigned>(index & 1) * 2;
  const float u1 = philox_uniform(r.v[w]);
  const float u2 = philox_uniform(r.v[w + 1]);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

}  // namespace megatron
