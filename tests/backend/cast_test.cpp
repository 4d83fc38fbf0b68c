// CPU casts: the contiguous f32 -> bf16/f16 fast path gives exactly the bits of the generic
// (strided) path and of the scalar conversion, for every kind of value, at any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "megatron/backend/backend.h"

namespace megatron {
namespace {

std::vector<float> awkward_values(std::size_t n) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          65504.0f,
                          65520.0f,
                          1e5f,
                          -1e30f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          1e-40f,
                          6e-8f,
                          3e-5f,
                          1.00390625f /* bf16 tie */,
                          1.0009765625f /* f16 tie */};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-4, 4);
  while (v.size() < n)
    v.push_back(std::ldexp(u(rng), static_cast<int>(rng() % 40) - 20));
  return v;
}

template <typename H>
void check(DType dtype, int threads) {
  set_compute_threads(threads);
  Backend& be = backend_for(Device::cpu());
  const std::int64_t rows = 301, cols = 257;  // > the parallel threshold, odd sizes
  const std::vector<float> values = awkward_values(static_cast<std::size_t>(rows * cols));
  const Tensor src = Tensor::from(values, {rows, cols});
  Tensor fast = Tensor::empty({rows, cols}, dtype);
  be.cast(src, fast);
  // The transposed destination forces the generic element-by-element path.
  Tensor generic_t = Tensor::empty({cols, rows}, dtype);
  Tensor generic = generic_t.transpose(0, 1);
  be.cast(src, generic);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const H expected(values[static_cast<std::size_t>(r * cols + c)]);
      const H got = fast.data<H>()[r * cols + c];
      const H slow = generic_t.data<H>()[c * rows + r];
      ASSERT_EQ(got.bits, expected.bits) << "element " << r << "," << c;
      ASSERT_EQ(slow.bits, expected.bits) << "element " << r << "," << c;
    }
  }
  set_compute_threads(0);
}

TEST(CpuCast, Bf16FastPathMatchesScalarAndGenericPath) {
  check<bf16>(DType::bf16, 1);
  check<bf16>(DType::bf16, 2);
}

TEST(CpuCast, F16FastPathMatchesScalarAndGenericPath) {
  check<f16>(DType::f16, 1);
  check<f16>(DType::f16, 2);
}

}  // namespace
}  // namespace megatron
