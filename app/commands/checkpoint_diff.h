// `megatron-app inspect --diff`: tensor-by-tensor comparison of two checkpoints.
#pragma once

#include <filesystem>
#include <ostream>

#include "megatron/checkpoint/checkpoint.h"

namespace megatron::app {

// Prints differences in attributes (as notes), tensors only in one file, shape and dtype
// mismatches, and the max abs/rel difference of every common tensor, then a final "identical" or
// "N tensors differ" line. Returns the number of tensors that differ (values, shape, dtype, or
// present in one file only); attributes and config do not count.
int print_checkpoint_diff(std::ostream& out, const std::filesystem::path& file_a,
                          const checkpoint::CheckpointState& a, const std::filesystem::path& file_b,
                          const checkpoint::CheckpointState& b);

}  // namespace megatron::app
