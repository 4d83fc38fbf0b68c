// CPU per-row ops of Mixture of Experts: scaling rows by their routing weights and the rows' dot
// products (the weights' gradient).
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/op_row_checks.h"

namespace megatron::cpu {

void CpuBackend::scale_rows(const Tensor& x, const Tensor& scales, Tensor& y) {
  constexpr const char* op = "scale_rows";
  ops::check_device(op, "x", x, Device::cpu());
  ops::check_device(op, "scales", scales, Device::cpu());
  ops::check_device(op, "y", y, Device::cpu());
  ops::check_rows_and_vector(op, "x", x, "scales", scales, x);
  ops::check_rows_and_vector(op, "y", y, "scales", scales, x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const std::int64_t rows = x.size(0), n = x.size(1);
    const T* s = scales.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t m = 0; m < rows; ++m) {
      const T* in = x.data<T>() + m * x.stride(0);
      T* out = y.data<T>() + m * y.stride(0);
      const T factor = s[m];
#pragma omp simd
      for (std::int64_t j = 0; j < n; ++j)
        out[j] = in[j] * factor;
    }
  });
}

void CpuBackend::row_dots(const Tensor& a, const Tensor& b, Tensor& out) {
  constexpr const char* op = "row_dots";
  ops::check_device(op, "a", a, Device::cpu());
  ops::check_device(op, "b", b, Device::cpu());
  ops::check_device(op, "out", out, Device::cpu());
  ops::check_rows_and_vector(op, "a", a, "out", out, a);
  ops::check_rows_and_vector(op, "b", b, "out", out, a);
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    const std::int64_t rows = a.size(0), n = a.size(1);
    T* o = out.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t m = 0; m < rows; ++m) {
      const T* u = a.data<T>() + m * a.stride(0);
      const T* v = b.data<T>() + m * b.stride(0);
      T sum = 0;
      for (std::int64_t j = 0; j < n; ++j)
        sum += u[j] * v[j];
      o[m] = sum;
    }
  });
}

}  // namespace megatron::cpu
