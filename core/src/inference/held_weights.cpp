// Releasing gradients and narrowing GEMM-only weights for generation.
#include "megatron/inference/held_weights.h"

#include "megatron/backend/backend.h"

namespace megatron::inference {

namespace {

std::int64_t bytes_of(const Tensor& t) {
  return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0;
}

}  // namespace

HeldWeights hold_for_generation(ParameterSet& params, DType compute) {
  HeldWeights held;
  const bool narrow = compute == DType::bf16 || compute == DType::f16;
  for (auto& owned : params) {
    Parameter& p = *owned;
    held.bytes_before += bytes_of(p.value) + bytes_of(p.grad);
    p.grad = Tensor();
    if (narrow && p.narrowable && p.value.dtype() == DType::f32 && !p.value.device().is_meta()) {
      Backend& be = backend_for(p.value.device());
      Tensor narrowed = be.empty(p.value.shape(), compute);
      be.cast(p.value, narrowed);
      p.value = narrowed;
      ++held.narrowed;
    }
    held.bytes += bytes_of(p.value);
  }
  return held;
}

}  // namespace megatron::inference
