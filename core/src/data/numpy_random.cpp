// numpy's legacy RandomState: seeding checks and the masked bounded draw.
#include "megatron/data/numpy_random.h"

#include <string>

#include "megatron/error.h"

namespace megatron::data {

namespace {
constexpr std::int64_t kMaxSeed = 0xFFFFFFFFLL;
}

NumpyRandomState::NumpyRandomState(std::int64_t seed) {
  if (seed < 0 || seed > kMaxSeed) {
    throw Error("random seed " + std::to_string(seed) +
                " is out of range: numpy.random.RandomState accepts seeds in [0, 4294967295]");
  }
  engine_.seed(static_cast<std::uint32_t>(seed));
}

std::uint64_t NumpyRandomState::random_interval(std::uint64_t max) {
  if (max == 0) return 0;
  std::uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  std::uint64_t value = 0;
  if (max <= 0xFFFFFFFFULL) {
    do {
      value = next_uint32() & mask;
    } while (value > max);
  } else {
    do {
      value = next_uint64() & mask;
    } while (value > max);
  }
  return value;
}

}  // namespace megatron::data
