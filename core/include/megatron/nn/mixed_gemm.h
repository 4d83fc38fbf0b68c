// GEMM with reduced-precision inputs: bf16/fp16 mixed precision casts the two inputs to the
// compute dtype and keeps fp32 accumulation and output, as autocast does for matmuls.
#pragma once

#include <cstdint>
#include <vector>

#include "megatron/backend/backend.h"

namespace megatron::nn {

// c = alpha op(a) op(b) + beta c; with `compute` bf16 or f16, a and b are rounded to it first
// (Backend::gemm_operand; c and the rest of the model stay in their own dtype). Any other `compute` runs the GEMM as given.
void mixed_gemm(Backend& backend, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                Tensor& c, DType compute, float alpha = 1.0f, float beta = 0.0f);

// Backend::grouped_gemm likewise (the experts' GEMMs of Mixture of Experts).
void mixed_grouped_gemm(Backend& backend, const Tensor& a, bool trans_a, const Tensor& b,
                        bool trans_b, const std::vector<std::int64_t>& group_rows, Tensor& c,
                        DType compute, float alpha = 1.0f, float beta = 0.0f);

}  // namespace megatron::nn
