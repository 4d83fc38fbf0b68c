// numpy's legacy numpy.random.RandomState(seed), bit for bit (numpy 1.x), as far as Megatron's
// datasets use it: MT19937 seeded from one integer, bounded draws, shuffles, random(), randint,
// geometric and choice with probabilities.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace megatron::data {

// RandomState(seed) for an integer seed in [0, 2^32). numpy seeds MT19937 with the reference
// init_genrand recurrence and draws tempered 32-bit words from it, which is exactly what
// std::mt19937(seed) does, so the standard engine is the generator here.
class NumpyRandomState {
 public:
  // Throws megatron::Error when the seed is outside [0, 2^32), as numpy raises ValueError.
  explicit NumpyRandomState(std::int64_t seed);

  // numpy's next_uint32 / next_uint64 for MT19937 (the 64-bit value is high word first).
  std::uint32_t next_uint32() { return static_cast<std::uint32_t>(engine_()); }
  std::uint64_t next_uint64() {
    const std::uint64_t high = next_uint32();
    return (high << 32) | next_uint32();
  }

  // numpy's random_interval(max): uniform in [0, max] by masked rejection, drawing 32-bit words
  // while max fits in 32 bits and 64-bit words beyond.
  std::uint64_t random_interval(std::uint64_t max);

  // RandomState.shuffle of a 1-D array or of a Python list (numpy's typed and untyped paths draw
  // alike): Fisher-Yates from the last element down, element i swapped with random_interval(i).
  // The draws do not depend on the element type.
  template <typename T>
  void shuffle(std::span<T> values) {
    for (std::size_t i = values.size(); i-- > 1;) {
      const auto j = static_cast<std::size_t>(random_interval(i));
      std::swap(values[i], values[j]);
    }
  }

  // RandomState.random() / random_sample(): a double in [0, 1) from 53 bits of two words
  // (27 of the first, 26 of the second).
  double random();

  // RandomState.randint(low, high) with the default int64 dtype: uniform in [low, high) by
  // masked rejection, no draw when high - low == 1. Throws megatron::Error when low >= high,
  // as numpy raises ValueError.
  std::int64_t randint(std::int64_t low, std::int64_t high);

  // RandomState.geometric(p): trials up to the first success, p in (0, 1]. numpy's legacy rule:
  // a search of the CDF for p >= 1/3, otherwise ceil(log1p(-U) / log(1 - p)). One draw.
  std::int64_t geometric(double p);

  // The index RandomState.choice(a, p=probabilities) picks (size None, with replacement): one
  // random() located in the normalised running sum of p (searchsorted, side 'right'). p is
  // checked as numpy checks it: not empty, no negative or NaN entry, sum within sqrt(eps) of 1.
  std::size_t choice(std::span<const double> probabilities);

 private:
  std::mt19937 engine_;
};

}  // namespace megatron::data
