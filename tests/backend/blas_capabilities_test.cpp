// Which OpenBLAS kernels count as generic on which CPU, the GEMM rule that avoids them, and the
// start-up log's line.
#include "backend/cpu/blas_capabilities.h"

#include <gtest/gtest.h>

#include "backend/cpu/gemm_policy.h"

namespace megatron::cpu {
namespace {

TEST(BlasCapabilities, CoreNamesMapToTheirKernelsInstructionSets) {
  bool known = false;
  EXPECT_EQ(openblas_core_level("SkylakeX", &known), IsaLevel::avx512);
  EXPECT_TRUE(known);
  EXPECT_EQ(openblas_core_level("SAPPHIRERAPIDS"), IsaLevel::avx512);
  EXPECT_EQ(openblas_core_level("Haswell"), IsaLevel::avx2);
  EXPECT_EQ(openblas_core_level("Zen"), IsaLevel::avx2);
  EXPECT_EQ(openblas_core_level("Sandybridge"), IsaLevel::avx);
  EXPECT_EQ(openblas_core_level("Prescott", &known), IsaLevel::baseline);
  EXPECT_TRUE(known);
  openblas_core_level("NewCore2027", &known);
  EXPECT_FALSE(known);
}

TEST(BlasCapabilities, GenericMeansPreAvx2KernelsOnAnAvx2OrBetterCpu) {
  // Debian 12's OpenBLAS on a new Intel Xeon (family 6 model 207).
  EXPECT_TRUE(openblas_runs_generic_kernels("Prescott", IsaLevel::avx512));
  EXPECT_TRUE(openblas_runs_generic_kernels("Nehalem", IsaLevel::avx2));
  EXPECT_TRUE(openblas_runs_generic_kernels("Sandybridge", IsaLevel::avx512));
  // Right, or close enough to keep the measured rule (Zen 4 under its "Zen" AVX2 kernels).
  EXPECT_FALSE(openblas_runs_generic_kernels("SkylakeX", IsaLevel::avx512));
  EXPECT_FALSE(openblas_runs_generic_kernels("Zen", IsaLevel::avx512));
  EXPECT_FALSE(openblas_runs_generic_kernels("Haswell", IsaLevel::avx2));
  // Nothing better to run on an old CPU; an unlisted name is trusted.
  EXPECT_FALSE(openblas_runs_generic_kernels("Prescott", IsaLevel::avx));
  EXPECT_FALSE(openblas_runs_generic_kernels("NewCore2027", IsaLevel::avx512));
}

TEST(BlasCapabilities, GenericOpenBlasSendsEveryF32GemmToOneDnn) {
  GemmProblem tiny;
  tiny.m = tiny.n = tiny.k = 32;
  GemmProblem wide;
  wide.m = 2048;
  wide.n = wide.k = 3072;
  for (const GemmProblem& p : {tiny, wide}) {
    EXPECT_EQ(f32_library(p, false), GemmLibrary::openblas);
    EXPECT_EQ(f32_library(p, true), GemmLibrary::onednn);
  }
}

TEST(BlasCapabilities, SummaryNamesTheCpuOpenBlasCoreAndRoutes) {
  const std::string line = gemm_routes_summary();
  EXPECT_NE(line.find(std::string("CPU ") + isa_name(cpu_isa_level())), std::string::npos) << line;
  EXPECT_NE(line.find("OpenBLAS"), std::string::npos) << line;
  EXPECT_NE(line.find(" core "), std::string::npos) << line;
  EXPECT_NE(line.find("f32 GEMMs: "), std::string::npos) << line;
  EXPECT_NE(line.find("bf16 GEMMs: "), std::string::npos) << line;
  EXPECT_EQ(line.find("every shape") != std::string::npos, openblas_kernels_generic()) << line;
}

}  // namespace
}  // namespace megatron::cpu
