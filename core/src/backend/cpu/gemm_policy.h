// Which library runs an f32 GEMM on the CPU: a fixed rule measured on this project's machine
// (AMD EPYC Zen 4, AVX-512; OpenBLAS 0.3.21 pthread, oneDNN 2.6). Fixed rather than calibrated at
// run time so the same shape always takes the same route, which keeps results bitwise
// reproducible from run to run. The measurements behind it are in bench/RESULTS.md (GEMM section):
// oneDNN f32 matmul rate / cblas_sgemm rate per shape, single thread, thread CPU time (the machine
// is shared, so wall-clock rates were too noisy to calibrate with).
#pragma once

#include <optional>
#include <string>

#include "backend/cpu/gemm_problem.h"
#include "megatron/tensor/tensor.h"

namespace megatron::cpu {

enum class GemmLibrary { openblas, onednn };

// For a problem after batch folding (gemm.cpp); ratios are oneDNN's rate / OpenBLAS's on the
// calibration grid:
//   one matrix, B transposed      -> oneDNN at every size: x @ W^T, every linear layer's forward.
//                                    oneDNN computes each row of C the same way whatever M is,
//                                    OpenBLAS does not (M = 1 takes another path), and continuous
//                                    batching must give a sequence the logits it gets alone
//                                    (tests/backend/gemm_test.cpp RowsDoNotDependOnTheRowsBeside).
//   batch*M*N*K < 64^3            -> OpenBLAS: oneDNN's per-call cost (primitive lookup, memory
//                                    objects) outweighs the product (0.51-0.87x)
//   batch > 1                     -> oneDNN: one primitive parallel over the batch, against a
//                                    loop of cblas calls (0.89-1.37x on attention-shaped batches)
//   B not transposed, N > 2048,   -> OpenBLAS: oneDNN's brgemm is slower on wide untransposed B
//   K >= 512                         (0.81x NN and 0.83x TN at 2048x3072x3072; 0.81-1.16x here)
//   otherwise                     -> oneDNN: 0.88-1.49x (narrow N, thin K, B transposed as in
//                                    x @ W^T); near ties it also keeps the work on the OpenMP
//                                    threads every other CPU kernel uses.
// Over the 110-shape grid the last three rules pick a library within 86% of the faster one on
// every shape (99% geometric mean); the first costs tiny weight products oneDNN's per-call overhead
// (0.51-0.87x), which only decoding and toy models meet.
inline GemmLibrary f32_library(const GemmProblem& p) {
  constexpr std::int64_t kTinyWork = 64 * 64 * 64;
  if (p.batch == 1 && p.b.trans && !p.a.trans) return GemmLibrary::onednn;
  if (p.batch * p.m * p.n * p.k < kTinyWork) return GemmLibrary::openblas;
  if (p.batch > 1) return GemmLibrary::onednn;
  if (!p.b.trans && p.n > 2048 && p.k >= 512) return GemmLibrary::openblas;
  return GemmLibrary::onednn;
}

// The rule on this machine: when OpenBLAS runs generic (pre-AVX2) kernels on a CPU with AVX2 or
// better (blas_capabilities.h; Debian 12's OpenBLAS 0.3.21 takes some new Intel CPUs for a
// "Prescott": 40 GFLOP/s on 2 threads against 250 with its SkylakeX kernels) it serves no shape
// well, and every f32 GEMM goes to oneDNN, which compiles its kernels for the CPU it runs on. The
// route still depends only on the shape and the machine (CPU and library build), so a run
// repeats bit for bit on the same machine.
inline GemmLibrary f32_library(const GemmProblem& p, bool openblas_generic) {
  return openblas_generic ? GemmLibrary::onednn : f32_library(p);
}

// Overrides the rule above for every f32 GEMM in the process (nullopt restores it), so tests can
// run each case through both libraries and benchmarks can compare them.
void force_f32_library(std::optional<GemmLibrary> library);

// The route CpuBackend::gemm takes for these arguments ("openblas", "onednn brg:avx512_core_bf16",
// "widened to f32, openblas", ...), for tests and benchmarks; validates like gemm, computes
// nothing.
std::string gemm_route(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                       float alpha = 1.0f, float beta = 0.0f);

}  // namespace megatron::cpu
