// How many samples training asks of each dataset split (Megatron's train_val_test_num_samples).
#pragma once

#include <array>
#include <cstdint>

#include "megatron/config/core_config.h"

namespace megatron::train {

// The optimizer steps of the run (Megatron's update_train_iters): train_iters, or, for
// sample-based training, train_samples // global_batch_size, or with batch-size ramp-up what
// batch_schedule.h's update_train_iters counts. `global_batch_size` is the final one (after any
// ramp-up). Throws ConfigError when neither train_iters nor train_samples is set.
std::int64_t train_iterations(const config::TrainingConfig& training,
                              std::int64_t global_batch_size);

// Megatron's get_train_valid_test_num_samples: train = train_samples or train_iters * gbs;
// valid = (train_iters // eval_interval + 1) * eval_iters * gbs; test = eval_iters * gbs, with
// train_iters as train_iterations() resolves it. Index with data::Split.
std::array<std::int64_t, 3> train_valid_test_num_samples(const config::TrainingConfig& training,
                                                         std::int64_t global_batch_size);

}  // namespace megatron::train
