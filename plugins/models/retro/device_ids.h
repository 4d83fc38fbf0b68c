// Row ids built on the host (the Retro blocks' chunk layouts) as an i32 tensor on the backend's
// device, for its row gathers and scatters.
#pragma once

#include <cstdint>
#include <vector>

#include "megatron/backend/backend.h"

namespace megatron::retro {

inline Tensor device_ids(Backend& be, const std::vector<std::int32_t>& ids) {
  const Tensor host = Tensor::from(ids, {static_cast<std::int64_t>(ids.size())});
  Tensor out = be.empty(host.shape(), DType::i32);
  be.copy(host, out);
  return out;
}

}  // namespace megatron::retro
