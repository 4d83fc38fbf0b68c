// Start-up measurement of a rank's GEMM peak (megatron/train/peak_flops.h).
#include "megatron/train/peak_flops.h"

#include <algorithm>
#include <chrono>

namespace megatron::train {

double measure_peak_tflops(Backend& backend, DType dtype) {
  const bool gpu = backend.device().is_cuda();
  const std::int64_t n = gpu ? 8192 : 1024;
  const DType input = dtype == DType::f64 ? DType::f32 : dtype;
  Tensor a = backend.empty({n, n}, input), b = backend.empty({n, n}, input);
  Tensor c = backend.empty({n, n}, DType::f32);
  backend.fill(a, 0.5);
  backend.fill(b, 0.25);
  // x @ W^T, the form of every linear layer's forward.
  backend.gemm(a, false, b, true, c);
  backend.synchronize();
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    backend.gemm(a, false, b, true, c);
    backend.synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0) best = std::max(best, 2.0 * double(n) * double(n) * double(n) / seconds);
  }
  return best / 1e12;
}

}  // namespace megatron::train
