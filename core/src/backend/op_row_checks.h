// Argument checks of the per-row ops (scale_rows, row_dots), shared by the CPU and CUDA backends.
#pragma once

#include "backend/op_checks.h"

namespace megatron::ops {

// m (M, N) with contiguous rows and v (M), both of m_like's float dtype (f32 or f64).
inline void check_rows_and_vector(const char* op, const char* m_name, const Tensor& m,
                                  const char* v_name, const Tensor& v, const Tensor& m_like) {
  check_rank(op, m_name, m, 2);
  check_dtype(op, m_name, m, {DType::f32, DType::f64});
  check_same_dtype(op, m_name, m, "the first operand", m_like);
  check_same_shape(op, m_name, m, "the first operand", m_like);
  check_last_dim_contiguous(op, m_name, m);
  check_shape(op, v_name, v, {m.size(0)});
  check_same_dtype(op, v_name, v, m_name, m);
  check_contiguous(op, v_name, v);
}

}  // namespace megatron::ops
