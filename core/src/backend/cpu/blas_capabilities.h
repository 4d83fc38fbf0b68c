// What the CPU offers and what OpenBLAS runs on it: Debian 12's OpenBLAS 0.3.21 picks its kernels
// at load time from the CPU model and takes some newer Intel CPUs (e.g. family 6 model 207) for a
// "Prescott", running generic SSE kernels at a sixth of the AVX-512 rate. Detected once, so the
// GEMM routes avoid such kernels and the start-up log names what runs.
#pragma once

#include <string>
#include <string_view>

namespace megatron::cpu {

// The vector instruction sets GEMM kernels are written for, in order.
enum class IsaLevel { baseline, avx, avx2, avx512 };

const char* isa_name(IsaLevel level);

// This CPU's level (AVX2 needs FMA; AVX-512 the F, BW, DQ and VL subsets the kernels use); the
// attention kernels pick their variant by it too.
IsaLevel cpu_isa_level();

// The level of an OpenBLAS core name (openblas_get_corename(): "SkylakeX", "Haswell", "Zen",
// "Prescott", ...; any case); `known` false for a name this table does not list.
IsaLevel openblas_core_level(std::string_view core, bool* known = nullptr);

// OpenBLAS runs generic (pre-AVX2) kernels on a CPU with AVX2 or better: its `core` is a known
// name below AVX2 and `cpu` is AVX2 or above. An unknown name is trusted.
bool openblas_runs_generic_kernels(std::string_view core, IsaLevel cpu);

// This process's: openblas_get_corename() against cpu_isa_level(), decided once.
bool openblas_kernels_generic();

// bf16 GEMMs run faster as exact f32 widenings here: oneDNN 2.6 has no fast bf16 kernel without
// AVX512-BF16 (which every AMX CPU also has), only a gemm:jit that converts as it goes.
bool bf16_gemm_widened();

// One line for the start-up log: the CPU's level, OpenBLAS's build and core, and which library
// runs f32 and bf16 GEMMs here.
std::string gemm_routes_summary();

}  // namespace megatron::cpu
