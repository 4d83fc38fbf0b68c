// numpy's legacy RandomState: seeding checks, the masked bounded draw and the distributions
// Megatron's masked datasets use.
#include "megatron/data/numpy_random.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

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

double NumpyRandomState::random() {
  const std::uint32_t high = next_uint32() >> 5;
  const std::uint32_t low = next_uint32() >> 6;
  return (high * 67108864.0 + low) / 9007199254740992.0;
}

std::int64_t NumpyRandomState::randint(std::int64_t low, std::int64_t high) {
  if (low >= high) {
    throw Error("randint(" + std::to_string(low) + ", " + std::to_string(high) +
                "): low must be below high");
  }
  // numpy draws an offset in [0, high - 1 - low] by the same masked rejection as random_interval
  // (32-bit words while the range fits in 32 bits); unsigned arithmetic covers the full int64
  // range without overflow.
  const std::uint64_t range =
      static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low) - 1;
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + random_interval(range));
}

std::int64_t NumpyRandomState::geometric(double p) {
  if (!(p > 0.0 && p <= 1.0)) {
    throw Error("geometric(" + std::to_string(p) + "): p must be in (0, 1]");
  }
  if (p >= 1.0 / 3.0) {
    const double u = random();
    std::int64_t trials = 1;
    double probability = p;
    double cumulative = p;
    while (u > cumulative) {
      probability *= 1.0 - p;
      cumulative += probability;
      ++trials;
    }
    return trials;
  }
  const double trials = std::ceil(std::log1p(-random()) / std::log(1.0 - p));
  // Only p below ~1e-16 can overflow; numpy's (long) cast of such a value is undefined, so refuse.
  if (!(trials < 9223372036854775808.0)) {
    throw Error("geometric(" + std::to_string(p) + "): the draw does not fit in int64");
  }
  return static_cast<std::int64_t>(trials);
}

std::size_t NumpyRandomState::choice(std::span<const double> probabilities) {
  if (probabilities.empty()) throw Error("choice: 'a' cannot be empty unless no samples are taken");
  for (const double p : probabilities) {
    if (!(p >= 0.0)) throw Error("choice: probabilities are not non-negative");
  }
  // numpy checks the sum with a Kahan summation against sqrt(float64 eps).
  double sum = probabilities[0];
  double compensation = 0.0;
  for (std::size_t i = 1; i < probabilities.size(); ++i) {
    const double y = probabilities[i] - compensation;
    const double t = sum + y;
    compensation = (t - sum) - y;
    sum = t;
  }
  if (std::fabs(sum - 1.0) > std::sqrt(std::numeric_limits<double>::epsilon())) {
    throw Error("choice: probabilities do not sum to 1");
  }
  // cdf = p.cumsum(); cdf /= cdf[-1]; the pick is the number of cdf entries <= u.
  std::vector<double> cdf(probabilities.size());
  double running = 0.0;
  for (std::size_t i = 0; i < probabilities.size(); ++i) {
    running += probabilities[i];
    cdf[i] = running;
  }
  const double total = cdf.back();
  for (double& c : cdf)
    c /= total;
  const double u = random();
  std::size_t index = 0;
  while (index < cdf.size() && cdf[index] <= u)
    ++index;
  return index;
}

}  // namespace megatron::data
