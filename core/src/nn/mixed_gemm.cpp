// GEMM with inputs cast to bf16/fp16 for mixed-precision training.
#include "megatron/nn/mixed_gemm.h"

namespace megatron::nn {

namespace {

Tensor cast_to(Backend& backend, const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = backend.empty(t.shape(), dtype);
  backend.cast(t, out);
  return out;
}

}  // namespace

void mixed_gemm(Backend& backend, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                Tensor& c, DType compute, float alpha, float beta) {
  if (compute != DType::bf16 && compute != DType::f16) {
    backend.gemm(a, trans_a, b, trans_b, c, alpha, beta);
    return;
  }
  backend.gemm(cast_to(backend, a, compute), trans_a, cast_to(backend, b, compute), trans_b, c,
               alpha, beta);
}

void mixed_grouped_gemm(Backend& backend, const Tensor& a, bool trans_a, const Tensor& b,
                        bool trans_b, const std::vector<std::int64_t>& group_rows, Tensor& c,
                        DType compute, float alpha, float beta) {
  if (compute != DType::bf16 && compute != DType::f16) {
    backend.grouped_gemm(a, trans_a, b, trans_b, group_rows, c, alpha, beta);
    return;
  }
  backend.grouped_gemm(cast_to(backend, a, compute), trans_a, cast_to(backend, b, compute), trans_b,
                       group_rows, c, alpha, beta);
}

}  // namespace megatron::nn
