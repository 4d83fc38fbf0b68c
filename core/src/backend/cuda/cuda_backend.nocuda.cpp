// The CUDA backend's entry points in builds without CUDA: they say why there is no GPU.
#include "megatron/backend/backend.h"

namespace megatron {

Backend& cuda_backend(int ordinal) {
  throw Error("cuda:" + std::to_string(ordinal) +
              " requested, but this build has no CUDA backend (configure with -DMEGATRON_CUDA=ON)");
}

bool cuda_backend_available() { return false; }

}  // namespace megatron
