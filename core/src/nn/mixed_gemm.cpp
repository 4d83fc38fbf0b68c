// GEMM with inputs rounded to bf16/fp16 for mixed-precision training.
#include "megatron/nn/mixed_gemm.h"

namespace megatron::nn {

void mixed_gemm(Backend& backend, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                Tensor& c, DType compute, float alpha, float beta) {
  if (compute != DType::bf16 && compute != DType::f16) {
    backend.gemm(a, trans_a, b, trans_b, c, alpha, beta);
    return;
  }
  backend.gemm(backend.gemm_operand(a, compute), trans_a, backend.gemm_operand(b, compute), trans_b,
               c, alpha, beta);
}

void mixed_grouped_gemm(Backend& backend, const Tensor& a, bool trans_a, const Tensor& b,
                        bool trans_b, const std::vector<std::int64_t>& group_rows, Tensor& c,
                        DType compute, float alpha, float beta) {
  if (compute != DType::bf16 && compute != DType::f16) {
    backend.grouped_gemm(a, trans_a, b, trans_b, group_rows, c, alpha, beta);
    return;
  }
  backend.grouped_gemm(backend.gemm_operand(a, compute), trans_a, backend.gemm_operand(b, compute),
                       trans_b, group_rows, c, alpha, beta);
}

}  // namespace megatron::nn
