// Backend::gemm_operand's default: the operand cast to the GEMM's compute dtype.
#include "megatron/backend/backend.h"

namespace megatron {

Tensor Backend::gemm_operand(const Tensor& t, DType compute) {
  if (t.dtype() == compute) return t;
  Tensor out = empty(t.shape(), compute);
  cast(t, out);
  return out;
}

}  // namespace megatron
