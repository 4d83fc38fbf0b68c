// Helpers for CPU kernels: dtype dispatch and walking the rows of strided tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/op_checks.h"
#include "megatron/tensor/tensor.h"

namespace megatron::cpu {

// Calls fn.template operator()<T>() with T = float or double per `dtype`; other dtypes are an
// error naming the op.
template <typename Fn>
void dispatch_float(const char* op, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn.template operator()<float>();
      return;
    case DType::f64:
      fn.template operator()<double>();
      return;
    default:
      ops::fail(op,
                "unsupported dtype " + std::string(dtype_name(dtype)) + " (float32 or float64)");
  }
}

// The storage offsets (in elements) of the start of every row of `t` (all dimensions but the
// last), in logical order; the last dimension is addressed with t.stride(-1).
inline std::vector<std::int64_t> row_offsets(const Tensor& t) {
  const int rank = t.dim();
  const int outer = rank > 0 ? rank - 1 : 0;
  std::int64_t rows = 1;
  for (int d = 0; d < outer; ++d)
    rows *= t.shape()[d];
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(rows));
  std::vector<std::int64_t> counter(outer, 0);
  std::int64_t index = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    offsets[static_cast<std::size_t>(r)] = index;
    for (int d = outer - 1; d >= 0; --d) {
      if (++counter[d] < t.shape()[d]) {
        index += t.strides()[d];
        break;
      }
      index -= t.strides()[d] * (t.shape()[d] - 1);
      counter[d] = 0;
    }
  }
  return offsets;
}

// Number of rows and row length of a (..., N) tensor.
inline std::int64_t row_count(const Tensor& t) {
  std::int64_t rows = 1;
  for (int d = 0; d + 1 < t.dim(); ++d)
    rows *= t.shape()[d];
  return rows;
}

}  // namespace megatron::cpu
