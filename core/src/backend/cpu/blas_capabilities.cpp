// CPU and OpenBLAS capability detection for the GEMM routes (blas_capabilities.h).
#include "backend/cpu/blas_capabilities.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_policy.h"
#include "megatron/tensor/tensor.h"

namespace megatron::cpu {

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::baseline:
      return "SSE";
    case IsaLevel::avx:
      return "AVX";
    case IsaLevel::avx2:
      return "AVX2";
    case IsaLevel::avx512:
      return "AVX-512";
  }
  return "?";
}

IsaLevel cpu_isa_level() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return IsaLevel::avx512;
  }
  if (avx2) return IsaLevel::avx2;
  if (__builtin_cpu_supports("avx")) return IsaLevel::avx;
  return IsaLevel::baseline;
}

IsaLevel openblas_core_level(std::string_view core, bool* known) {
  // OpenBLAS's x86-64 DYNAMIC_ARCH cores (driver/others/dynamic.c), by the kernels they run.
  static const std::pair<const char*, IsaLevel> kCores[] = {{"skylakex", IsaLevel::avx512},
                                                            {"cooperlake", IsaLevel::avx512},
                                                            {"sapphirerapids", IsaLevel::avx512},
                                                            {"haswell", IsaLevel::avx2},
                                                            {"zen", IsaLevel::avx2},
                                                            {"excavator", IsaLevel::avx2},
                                                            {"sandybridge", IsaLevel::avx},
                                                            {"bulldozer", IsaLevel::avx},
                                                            {"piledriver", IsaLevel::avx},
                                                            {"steamroller", IsaLevel::avx},
                                                            {"prescott", IsaLevel::baseline},
                                                            {"core2", IsaLevel::baseline},
                                                            {"penryn", IsaLevel::baseline},
                                                            {"dunnington", IsaLevel::baseline},
                                                            {"nehalem", IsaLevel::baseline},
                                                            {"atom", IsaLevel::baseline},
                                                            {"opteron", IsaLevel::baseline},
                                                            {"barcelona", IsaLevel::baseline},
                                                            {"bobcat", IsaLevel::baseline},
                                                            {"nano", IsaLevel::baseline},
                                                            {"katmai", IsaLevel::baseline},
                                                            {"coppermine", IsaLevel::baseline},
                                                            {"northwood", IsaLevel::baseline},
                                                            {"banias", IsaLevel::baseline}};
  std::string lower(core);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& [name, level] : kCores) {
    if (lower == name) {
      if (known) *known = true;
      return level;
    }
  }
  if (known) *known = false;
  return IsaLevel::baseline;
}

bool openblas_runs_generic_kernels(std::string_view core, IsaLevel cpu) {
  bool known = false;
  const IsaLevel level = openblas_core_level(core, &known);
  return known && cpu >= IsaLevel::avx2 && level < IsaLevel::avx2;
}

namespace {

std::string openblas_core() {
  const char* core = openblas_get_corename();
  return core ? core : "";
}

// The route of a representative layer product (x @ W^T, 256 x 1024 x 1024) in `dtype`.
std::string layer_route(DType dtype) {
  Tensor a = Tensor::zeros({256, 1024}, dtype), b = Tensor::zeros({1024, 1024}, dtype);
  Tensor c = Tensor::zeros({256, 1024}, DType::f32);
  return gemm_route(a, false, b, true, c);
}

// "OpenBLAS 0.3.21" from openblas_get_config()'s "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...".
std::string openblas_version() {
  const char* config = openblas_get_config();
  std::string text = config ? config : "OpenBLAS";
  const std::size_t first = text.find(' ');
  const std::size_t second = first == std::string::npos ? first : text.find(' ', first + 1);
  return second == std::string::npos ? text : text.substr(0, second);
}

}  // namespace

bool openblas_kernels_generic() {
  static const bool generic = openblas_runs_generic_kernels(openblas_core(), cpu_isa_level());
  return generic;
}

bool bf16_gemm_widened() {
  return !__builtin_cpu_supports("avx512bf16");
}

std::string gemm_routes_summary() {
  const std::string core = openblas_core();
  bool known = false;
  const IsaLevel core_level = openblas_core_level(core, &known);
  std::string out = std::string("CPU ") + isa_name(cpu_isa_level()) + "; " + openblas_version() +
                    " core " + core + " (" +
                    (known ? std::string(isa_name(core_level)) + " kernels" : "unlisted core") +
                    "); f32 GEMMs: ";
  out += openblas_kernels_generic()
             ? "onednn for every shape (OpenBLAS runs generic kernels on this CPU)"
             : "layer products " + layer_route(DType::f32) +
                   ", tiny and wide untransposed ones openblas";
  out += "; bf16 GEMMs: " + layer_route(DType::bf16);
  return out;
}

std::string CpuBackend::describe() const {
  return "cpu: " + gemm_routes_summary();
}

}  // namespace megatron::cpu
