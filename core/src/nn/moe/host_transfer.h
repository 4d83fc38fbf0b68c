// Small host <-> device moves of the MoE block's bookkeeping (routing, counts, permutations): the
// routing arithmetic runs on the host (moe/routing.h), its results feed the backend's ops.
#pragma once

#include <vector>

#include "megatron/backend/backend.h"

namespace megatron::nn::moe {

// A host vector as a 1-D tensor of `dtype` on the backend's device.
template <typename T>
Tensor on_device(Backend& be, const std::vector<T>& values, DType dtype) {
  const Tensor host = Tensor::from(values, {static_cast<std::int64_t>(values.size())});
  Tensor out = be.empty(host.shape(), dtype);
  be.copy(host.dtype() == dtype ? host : host.to(dtype), out);
  return out;
}

// A device tensor's elements in f64 on the host.
inline std::vector<double> to_host(Backend& be, const Tensor& t) {
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  be.copy(t, host);
  return host.to_vector<double>();
}

}  // namespace megatron::nn::moe
