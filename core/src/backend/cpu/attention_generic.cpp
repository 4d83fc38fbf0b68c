// Fused-attention tile kernels for any x86-64 (SSE2 vectors), used when the CPU has no AVX2.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cpu/attention_kernels.h"
#include "megatron/tensor/philox.h"

namespace megatron::cpu::attention {
namespace {

template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(16)));
  typedef float unaligned __attribute__((vector_size(16), aligned(4)));
  typedef std::int32_t bits __attribute__((vector_size(16)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(16)));
  typedef double unaligned __attribute__((vector_size(16), aligned(8)));
};

template <class V>
inline V fmadd(V a, V b, V c) {
  return a * b + c;
}

// 4 x 2 vectors: 8 accumulators + 2 loads + 1 broadcast of the 16 registers.
constexpr int kTileRows = 4;
constexpr int kTileVectors = 2;

}  // namespace
}  // namespace megatron::cpu::attention

#include "backend/cpu/attention_tiles.h"

namespace megatron::cpu::attention {
namespace {
constexpr Kernels<float> kTableF32 = kernel_table<float>("generic");
constexpr Kernels<double> kTableF64 = kernel_table<double>("generic");
}  // namespace

const Kernels<float>& generic_kernels_f32() {
  return kTableF32;
}
const Kernels<double>& generic_kernels_f64() {
  return kTableF64;
}
}  // namespace megatron::cpu::attention
