// CPU casts: the contiguous f32 -> bf16/f16 fast path and the bf16/f16 -> f32 widening give
// exactly the bits of the generic (strided) path and of the scalar conversion, for every kind of
// value, at any thread count; a bf16 GEMM's operand (gemm_operand) holds exactly the bf16 values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/blas_capabilities.h"
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
                          1.0009765625f /* f16 tie */,
                          std::bit_cast<float>(0x7f800001u) /* signalling NaN */,
                          std::bit_cast<float>(0xffc12345u) /* negative NaN with a payload */,
                          std::bit_cast<float>(0x3f818000u) /* bf16 tie, rounds up to even */,
                          std::bit_cast<float>(0x7f7fffffu) /* largest float: rounds to inf */};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-4, 4);
  while (v.size() < n)
    v.push_back(std::ldexp(u(rng), static_cast<int>(rng() % 40) - 20));
  return v;
}

// Compute threads set for a scope, reset to the default even when an assertion returns early.
struct ComputeThreads {
  explicit ComputeThreads(int n) { set_compute_threads(n); }
  ~ComputeThreads() { set_compute_threads(0); }
};

constexpr std::int64_t kRows = 301, kCols = 257;  // > the parallel threshold, odd sizes

template <typename H>
void check(DType dtype, int threads) {
  const ComputeThreads scope(threads);
  Backend& be = backend_for(Device::cpu());
  const std::vector<float> values = awkward_values(static_cast<std::size_t>(kRows * kCols));
  const Tensor src = Tensor::from(values, {kRows, kCols});
  Tensor fast = Tensor::empty({kRows, kCols}, dtype);
  be.cast(src, fast);
  // The transposed destination forces the generic element-by-element path.
  Tensor generic_t = Tensor::empty({kCols, kRows}, dtype);
  Tensor generic = generic_t.transpose(0, 1);
  be.cast(src, generic);
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t c = 0; c < kCols; ++c) {
      const H expected(values[static_cast<std::size_t>(r * kCols + c)]);
      const H got = fast.data<H>()[r * kCols + c];
      const H slow = generic_t.data<H>()[c * kRows + r];
      ASSERT_EQ(got.bits, expected.bits) << "element " << r << "," << c;
      ASSERT_EQ(slow.bits, expected.bits) << "element " << r << "," << c;
    }
  }
}

// bf16/f16 -> f32, contiguous (fast path) and into a transposed destination (generic path).
template <typename H>
void check_widening(DType dtype, int threads) {
  const ComputeThreads scope(threads);
  Backend& be = backend_for(Device::cpu());
  const std::vector<float> values = awkward_values(static_cast<std::size_t>(kRows * kCols));
  Tensor narrow = Tensor::empty({kRows, kCols}, dtype);
  be.cast(Tensor::from(values, {kRows, kCols}), narrow);
  Tensor fast = Tensor::empty({kRows, kCols}, DType::f32);
  be.cast(narrow, fast);
  Tensor generic_t = Tensor::empty({kCols, kRows}, DType::f32);
  Tensor generic = generic_t.transpose(0, 1);
  be.cast(narrow, generic);
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t c = 0; c < kCols; ++c) {
      const float expected = static_cast<float>(narrow.data<H>()[r * kCols + c]);
      ASSERT_EQ(std::bit_cast<std::uint32_t>(fast.data<float>()[r * kCols + c]),
                std::bit_cast<std::uint32_t>(expected))
          << "element " << r << "," << c;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(generic_t.data<float>()[c * kRows + r]),
                std::bit_cast<std::uint32_t>(expected))
          << "element " << r << "," << c;
    }
  }
}

// The operand of a bf16 GEMM holds each value rounded to bf16: as bf16 where the CPU's bf16
// GEMMs pay, else as f32 (the GEMM would widen a bf16 copy); contiguous, strided, or given in
// bf16 already.
void check_bf16_gemm_operand(int threads) {
  const ComputeThreads scope(threads);
  Backend& be = backend_for(Device::cpu());
  const std::vector<float> values = awkward_values(static_cast<std::size_t>(kRows * kCols));
  const Tensor src = Tensor::from(values, {kRows, kCols});
  Tensor narrow = Tensor::empty({kRows, kCols}, DType::bf16);
  be.cast(src, narrow);
  const Tensor src_t = [&] {
    Tensor t = Tensor::empty({kCols, kRows}, DType::f32);
    Tensor view = t.transpose(0, 1);
    be.copy(src, view);
    return view;
  }();
  const DType expected_dtype = cpu::bf16_gemm_widened() ? DType::f32 : DType::bf16;
  for (const Tensor& given : {src, src_t, narrow}) {
    const Tensor operand = be.gemm_operand(given, DType::bf16).contiguous();
    ASSERT_EQ(operand.dtype(), expected_dtype) << given.describe();
    ASSERT_EQ(operand.shape(), given.shape());
    for (std::int64_t r = 0; r < kRows; ++r) {
      for (std::int64_t c = 0; c < kCols; ++c) {
        const std::int64_t i = r * kCols + c;
        const bf16 expected(values[static_cast<std::size_t>(i)]);
        const std::uint32_t got = expected_dtype == DType::f32
                                      ? std::bit_cast<std::uint32_t>(operand.data<float>()[i])
                                      : std::uint32_t{operand.data<bf16>()[i].bits} << 16;
        ASSERT_EQ(got, std::uint32_t{expected.bits} << 16)
            << given.describe() << " element " << r << "," << c;
      }
    }
  }
}

TEST(CpuCast, Bf16FastPathMatchesScalarAndGenericPath) {
  check<bf16>(DType::bf16, 1);
  check<bf16>(DType::bf16, 2);
}

TEST(CpuCast, F16FastPathMatchesScalarAndGenericPath) {
  check<f16>(DType::f16, 1);
  check<f16>(DType::f16, 2);
}

TEST(CpuCast, WideningMatchesScalarAndGenericPath) {
  check_widening<bf16>(DType::bf16, 1);
  check_widening<bf16>(DType::bf16, 2);
  check_widening<f16>(DType::f16, 2);
}

TEST(CpuCast, Bf16GemmOperandHoldsTheBf16Values) {
  check_bf16_gemm_operand(1);
  check_bf16_gemm_operand(2);
}

}  // namespace
}  // namespace megatron
