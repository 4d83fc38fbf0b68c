// The operand checks of Backend::grouped_gemm, shared by the default loop and a backend's own
// grouped form, so both refuse the same calls with the same messages.
#pragma once

#include <cstdint>
#include <vector>

#include "megatron/tensor/tensor.h"

namespace megatron {

// Throws Error("grouped_gemm: ...") when the shapes do not fit the groups (see
// Backend::grouped_gemm); dtypes are gemm's to check.
void check_grouped_gemm_shapes(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const std::vector<std::int64_t>& group_rows, const Tensor& c);

}  // namespace megatron
