// CpuBackend::gemm_operand: on CPUs whose bf16 GEMMs are widened to f32 (no AVX512-BF16), a bf16
// GEMM's operand is handed over as f32 already rounded to bf16, in one pass: the products are
// those of the bf16 GEMM, without the narrow copy that the GEMM would widen again (on an AVX-512
// Xeon the cast and the widening were an eighth of a bf16 GPT step, bench/RESULTS.md).
#include <algorithm>
#include <cstdint>

#include "backend/cpu/blas_capabilities.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rows.h"

namespace megatron::cpu {

namespace {

// out[i] = in[i] rounded to bf16 (round to nearest even, NaN kept a quiet NaN: bf16::from_float's
// rules), kept as f32. Written on the bits with an integer select so that the loop vectorises
// (bf16's own conversion, with its early return for NaN, does not).
MEGATRON_CPU_CLONES void round_to_bf16(const float* in, float* out, std::int64_t n) {
  const auto* bits = reinterpret_cast<const std::uint32_t*>(in);
  auto* rounded = reinterpret_cast<std::uint32_t*>(out);
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t u = bits[i];
    const std::uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const std::uint32_t quiet_nan = (u & 0xffff0000u) | 0x00400000u;
    rounded[i] = (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest;
  }
}

}  // namespace

Tensor CpuBackend::gemm_operand(const Tensor& t, DType compute) {
  if (compute != DType::bf16 || !bf16_gemm_widened() || !t.device().is_cpu()) {
    return Backend::gemm_operand(t, compute);
  }
  Tensor out = empty(t.shape(), DType::f32);
  if (t.dtype() == DType::f32 && t.is_contiguous()) {
    const float* in = t.data<float>();
    float* rounded = out.data<float>();
    constexpr std::int64_t kChunk = 16384;
    const std::int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 2)
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t begin = c * kChunk;
      round_to_bf16(in + begin, rounded + begin, std::min(kChunk, n - begin));
    }
    return out;
  }
  // Strided or other dtypes: through a bf16 copy (already bf16: widened exactly).
  cast(Backend::gemm_operand(t, DType::bf16), out);
  return out;
}

}  // namespace megatron::cpu
