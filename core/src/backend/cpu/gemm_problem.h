// A validated GEMM reduced to raw pointers and strides, shared by the OpenBLAS and oneDNN paths.
#pragma once

#include <cstdint>

#include "megatron/dtype.h"

namespace megatron::cpu {

// One input matrix as stored in memory: (rows, cols) row-major with row stride `ld`, where
// (rows, cols) = (M, K) for a or (K, N) for b, swapped when `trans`.
struct GemmOperand {
  const void* data = nullptr;     // batch 0, row 0, column 0
  std::int64_t batch = 1;         // 1 (broadcast over the problem's batch) or the problem's batch
  std::int64_t batch_stride = 0;  // elements between batches (rows * ld when batch is 1)
  std::int64_t ld = 1;            // elements between rows; >= cols
  bool trans = false;
};

// c[i] = alpha * op(a[i]) @ op(b[i]) + beta * c[i] for i < batch; c (M, N) row stride ldc.
struct GemmProblem {
  DType input_dtype = DType::f32;  // a and b; c is f32 (f64 when the inputs are f64)
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* c = nullptr;
  std::int64_t c_batch_stride = 0, ldc = 1;
};

}  // namespace megatron::cpu
