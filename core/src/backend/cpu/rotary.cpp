// CPU rotary position embedding (Megatron's non-interleaved "rotate half" form), forward and
// backward, over (B, S, H, D) views of any row strides.
#include <cstdint>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/optimizer_math.h"

namespace megatron::cpu {

namespace {

void check_rotary(const char* op, const Tensor& x, const char* x_name, const Tensor& cos,
                  const Tensor& sin, const Tensor& y, const char* y_name) {
  ops::check_device(op, x_name, x, Device::cpu());
  ops::check_device(op, "cos", cos, Device::cpu());
  ops::check_device(op, "sin", sin, Device::cpu());
  ops::check_device(op, y_name, y, Device::cpu());
  ops::check_rank(op, x_name, x, 4);
  ops::check_same_shape(op, y_name, y, x_name, x);
  ops::check_same_dtype(op, y_name, y, x_name, x);
  ops::check_last_dim_contiguous(op, x_name, x);
  ops::check_last_dim_contiguous(op, y_name, y);
  ops::check_rank(op, "cos", cos, 2);
  ops::check_same_shape(op, "sin", sin, "cos", cos);
  ops::check_same_dtype(op, "cos", cos, x_name, x);
  ops::check_same_dtype(op, "sin", sin, x_name, x);
  ops::check_last_dim_contiguous(op, "cos", cos);
  ops::check_last_dim_contiguous(op, "sin", sin);
  const std::int64_t seq = x.size(1), head_dim = x.size(3), rotary_dim = cos.size(1);
  if (cos.size(0) != seq) {
    ops::fail(op, "cos " + cos.describe() + " must have " + std::to_string(seq) +
                      " rows (the sequence length of " + x_name + " " + x.describe() + ")");
  }
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    ops::fail(op, "the rotary dimension (cos.size(1) = " + std::to_string(rotary_dim) +
                      ") must be even and at most the head dimension " + std::to_string(head_dim));
  }
}

// Each (b, s, h) row is rotated independently; a row's pair (i, i + R/2) is read before either
// element is written, so `out` may be the same view as `in`.
template <typename T, bool Backward>
void rotate_rows(const Tensor& in, const Tensor& cos, const Tensor& sin, Tensor& out) {
  if (in.numel() == 0) return;
  const std::int64_t seq = in.size(1), heads = in.size(2), head_dim = in.size(3);
  const std::int64_t half = cos.size(1) / 2, rotary_dim = cos.size(1);
  const auto in_rows = row_offsets(in);
  const auto out_rows = row_offsets(out);
  const T* in_base = in.data<T>();
  T* out_base = out.data<T>();
  const T* cos_base = cos.data<T>();
  const T* sin_base = sin.data<T>();
  const std::int64_t cos_stride = cos.stride(0), sin_stride = sin.stride(0);
  const auto rows = static_cast<std::int64_t>(in_rows.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t s = (r / heads) % seq;
    const T* x = in_base + in_rows[static_cast<std::size_t>(r)];
    T* y = out_base + out_rows[static_cast<std::size_t>(r)];
    const T* c = cos_base + s * cos_stride;
    const T* sn = sin_base + s * sin_stride;
#pragma omp simd
    for (std::int64_t i = 0; i < half; ++i) {
      if constexpr (Backward) {
        ops::rotary_pair_backward(x[i], x[i + half], c[i], sn[i], c[i + half], sn[i + half], y[i],
                                  y[i + half]);
      } else {
        ops::rotary_pair_forward(x[i], x[i + half], c[i], sn[i], c[i + half], sn[i + half], y[i],
                                 y[i + half]);
      }
    }
    if (y != x) {
      for (std::int64_t i = rotary_dim; i < head_dim; ++i)
        y[i] = x[i];
    }
  }
}

}  // namespace

void CpuBackend::rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  constexpr const char* op = "rotary_forward";
  check_rotary(op, x, "x", cos, sin, y, "y");
  dispatch_float(op, x.dtype(), [&]<typename T>() { rotate_rows<T, false>(x, cos, sin, y); });
}

void CpuBackend::rotary_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin,
                                 Tensor& dx) {
  constexpr const char* op = "rotary_backward";
  check_rotary(op, dy, "dy", cos, sin, dx, "dx");
  dispatch_float(op, dy.dtype(), [&]<typename T>() { rotate_rows<T, true>(dy, cos, sin, dx); });
}

}  // namespace megatron::cpu
