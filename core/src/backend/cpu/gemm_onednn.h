// GEMM through oneDNN's matmul primitive, with primitives cached by shape, strides and dtypes.
#pragma once

#include <string>

#include "backend/cpu/gemm_problem.h"

namespace megatron::cpu {

// Runs `problem` as one (batched, broadcasting) oneDNN matmul with f32 accumulation. Returns
// false, having touched nothing, when oneDNN has only a slow kernel for this dtype on this CPU
// (its reference kernel, f16 without AVX512-FP16; its emulating gemm:jit, bf16 without
// AVX512-BF16), so the caller can take another route. Needs m, n, k and batch > 0.
bool onednn_matmul(const GemmProblem& problem, float alpha, float beta);

// The oneDNN implementation that onednn_matmul uses for `problem` ("brg:avx512_core_bf16",
// "gemm:jit", ...; "" when it would return false); for tests and benchmarks.
std::string onednn_matmul_impl(const GemmProblem& problem, float alpha, float beta);

}  // namespace megatron::cpu
