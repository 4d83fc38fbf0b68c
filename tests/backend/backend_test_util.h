// Shared helpers for backend tests: a fixture parameterised over backends (CUDA cases skip, and
// say so, without a GPU), random tensors, tolerant and bitwise comparisons, and a central
// finite-difference gradient check in fp64.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "megatron/backend/backend.h"
#include "megatron/backend/cuda_status.h"
#include "megatron/tensor/tensor.h"

namespace megatron::testing {

inline Backend& host() {
  return backend_for(Device::cpu());
}

// Uniform random host tensor in [low, high), reproducible from the seed.
inline Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed, float low = -1.0f,
                            float high = 1.0f) {
  Tensor t = Tensor::empty(shape, dtype);
  host().fill_uniform(t, low, high, seed, 0);
  return t;
}

struct Tolerance {
  double atol;
  double rtol;
};

// Per-dtype tolerances for comparing an op against an fp64 reference.
inline Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::bf16:
      return {2e-2, 2e-2};
    case DType::f16:
      return {2e-3, 2e-3};
    default:
      return {0, 0};
  }
}

// |actual - expected| <= atol + rtol * |expected| everywhere; reports the worst element.
inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                            Tolerance tol) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " vs expected "
                                         << shape_str(expected.shape());
  }
  const auto a = actual.to_vector<double>();
  const auto e = expected.to_vector<double>();
  double worst = 0;
  std::size_t worst_at = 0;
  bool ok = true;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]);
    const double limit = tol.atol + tol.rtol * std::abs(e[i]);
    if (!(err <= limit) || std::isnan(a[i]) != std::isnan(e[i])) {
      ok = false;
      if (!(err <= worst) || std::isnan(err)) {
        worst = err;
        worst_at = i;
      }
    }
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max error " << worst << " at element " << worst_at << " (actual " << a[worst_at]
         << ", expected " << e[worst_at] << ", atol " << tol.atol << ", rtol " << tol.rtol << ")";
}

// Same bytes in logical order (for determinism checks).
inline ::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  }
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  if (std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) != 0) {
    return ::testing::AssertionFailure() << "contents differ";
  }
  return ::testing::AssertionSuccess();
}

// Runs with `n` compute threads, restoring the previous setting afterwards.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : previous_(compute_threads()) { set_compute_threads(n); }
  ~ScopedThreads() { set_compute_threads(previous_); }

 private:
  int previous_;
};

// Central finite differences in fp64: for up to `max_checks` elements of `input` (a contiguous f64
// host tensor that `loss` reads), compares (loss(x+h) - loss(x-h)) / 2h with `analytic`.
inline ::testing::AssertionResult gradient_matches(const std::function<double()>& loss,
                                                   Tensor& input, const Tensor& analytic,
                                                   double tolerance = 1e-6,
                                                   std::int64_t max_checks = 64, double h = 1e-6) {
  if (input.dtype() != DType::f64 || !input.is_contiguous() || !input.device().is_cpu()) {
    return ::testing::AssertionFailure() << "gradient_matches needs a contiguous f64 host input";
  }
  const auto grad = analytic.to_vector<double>();
  double* x = input.data<double>();
  const std::int64_t n = input.numel();
  const std::int64_t step = std::max<std::int64_t>(1, n / max_checks);
  for (std::int64_t i = 0; i < n; i += step) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(numeric - grad[static_cast<std::size_t>(i)]);
    if (err > tolerance * std::max(1.0, std::abs(numeric))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": numeric " << numeric << ", analytic "
             << grad[static_cast<std::size_t>(i)] << " (error " << err << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Sum of (t * weights) in f64: a scalar loss whose gradient with respect to t is `weights`.
inline double weighted_sum(const Tensor& t, const Tensor& weights) {
  const auto a = t.to_vector<double>();
  const auto w = weights.to_vector<double>();
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += a[i] * w[i];
  return s;
}

// Fixture for conformance tests: GetParam() is "cpu" or "cuda". CUDA cases skip, and say why,
// when no CUDA device is usable; they never pass silently.
class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && !cuda_backend_available()) {
      GTEST_SKIP() << "no usable CUDA device: " << cuda_status().message;
    }
  }
  Device device() const { return GetParam() == "cuda" ? Device::cuda(0) : Device::cpu(); }
  Backend& be() const { return backend_for(device()); }
  // Host tensor -> a copy on the backend's device (the same tensor's copy on CPU).
  Tensor upload(const Tensor& host_tensor) const {
    Tensor t = Tensor::empty(host_tensor.shape(), host_tensor.dtype(), device());
    be().copy(host_tensor, t);
    return t;
  }
  Tensor empty(const Shape& shape, DType dtype) const {
    return Tensor::empty(shape, dtype, device());
  }
  // Backend tensor -> host copy.
  Tensor download(const Tensor& t) const {
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    be().copy(t, h);
    be().synchronize();
    return h;
  }
};

#define MEGATRON_INSTANTIATE_BACKENDS(suite)             \
  INSTANTIATE_TEST_SUITE_P(                              \
      Backends, suite, ::testing::Values("cpu", "cuda"), \
      [](const ::testing::TestParamInfo<std::string>& param) { return param.param; })

}  // namespace megatron::testing
