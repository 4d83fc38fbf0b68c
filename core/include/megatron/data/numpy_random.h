// numpy's legacy numpy.random.RandomState(seed), bit for bit, as far as Megatron's data indices
// use it: MT19937 seeded from one integer, bounded draws and in-place shuffles.
#pragma once

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

  // RandomState.shuffle of a 1-D array: Fisher-Yates from the last element down, element i
  // swapped with random_interval(i). The draws do not depend on the element type.
  template <typename T>
  void shuffle(std::span<T> values) {
    for (std::size_t i = values.size(); i-- > 1;) {
      const auto j = static_cast<std::size_t>(random_interval(i));
      std::swap(values[i], values[j]);
    }
  }

 private:
  std::mt19937 engine_;
};

}  // namespace megatron::data
