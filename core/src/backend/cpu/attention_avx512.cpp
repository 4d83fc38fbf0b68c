// Fused-attention tile kernels compiled for AVX-512 (chosen at run time on CPUs that have it).
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cpu/attention_kernels.h"
#include "megatron/tensor/philox.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

namespace megatron::cpu::attention {
namespace {

template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(64)));
  typedef float unaligned __attribute__((vector_size(64), aligned(4)));
  typedef std::int32_t bits __attribute__((vector_size(64)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(64)));
  typedef double unaligned __attribute__((vector_size(64), aligned(8)));
};

inline VecOf<float>::type fmadd(VecOf<float>::type a, VecOf<float>::type b, VecOf<float>::type c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline VecOf<double>::type fmadd(VecOf<double>::type a, VecOf<double>::type b,
                                 VecOf<double>::type c) {
  return _mm512_fmadd_pd(a, b, c);
}

// 6 x 4 vectors: 24 accumulators + 4 loads + 1 broadcast of the 32 registers.
constexpr int kTileRows = 6;
constexpr int kTileVectors = 4;

}  // namespace
}  // namespace megatron::cpu::attention

#include "backend/cpu/attention_tiles.h"

namespace megatron::cpu::attention {
namespace {
constexpr Kernels<float> kTableF32 = kernel_table<float>("avx512");
constexpr Kernels<double> kTableF64 = kernel_table<double>("avx512");
}  // namespace
}  // namespace megatron::cpu::attention

#pragma GCC pop_options

namespace megatron::cpu::attention {
const Kernels<float>& avx512_kernels_f32() {
  return kTableF32;
}
const Kernels<double>& avx512_kernels_f64() {
  return kTableF64;
}
}  // namespace megatron::cpu::attention
