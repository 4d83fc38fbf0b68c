// Reading one parameter's slice of a checkpoint tensor at the current layout, shared by the
// trainer's resume and the public pretrained loader.
#pragma once

#include <string>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/nn/parameter.h"

namespace megatron::train {

inline bool tensor_parallel_shard(const Parameter& p) {
  return p.partition_dim >= 0 && p.partition_count > 1;
}

// Reads this rank's slice of checkpoint tensor `path` for parameter `p` into `live` (any
// device). Throws Error for a missing tensor (with `missing_hint` appended) or one of another
// global shape.
void read_parameter_slice(const checkpoint::CheckpointReader& reader, const std::string& path,
                          const Parameter& p, Tensor& live, const std::string& missing_hint);

}  // namespace megatron::train
