// Per-split sample counts from the [training] schedule, as Megatron's training.py computes them.
#include "megatron/train/sample_counts.h"

#include <string>

#include "megatron/data/split.h"
#include "megatron/error.h"
#include "megatron/train/batch_schedule.h"

namespace megatron::train {

std::int64_t train_iterations(const config::TrainingConfig& training,
                              std::int64_t global_batch_size) {
  if (global_batch_size <= 0) {
    throw Error("global batch size " + std::to_string(global_batch_size) + " must be positive");
  }
  if (!training.rampup_batch_size.empty()) {
    // The ramp's batch sizes, and so the iteration count, do not depend on the data-parallel
    // size (only how each batch is divided among the ranks does): one rank stands for any.
    const auto& r = training.rampup_batch_size;
    if (r.size() != 3) {
      throw ConfigError("training.rampup_batch_size: expected [start, increment, ramp-up samples]");
    }
    return update_train_iters(training, BatchSchedule::rampup(r[0], r[1], r[2], global_batch_size,
                                                              training.micro_batch_size, 1));
  }
  if (training.train_iters) return *training.train_iters;
  if (!training.train_samples) {
    throw ConfigError(
        "training.train_iters / training.train_samples: set one of them to say how long to "
        "train (the dataset splits are sized from it)");
  }
  return *training.train_samples / global_batch_size;
}

std::array<std::int64_t, 3> train_valid_test_num_samples(const config::TrainingConfig& training,
                                                         std::int64_t global_batch_size) {
  data::SampleSchedule schedule;
  schedule.train_iters = train_iterations(training, global_batch_size);
  // Megatron tests `if args.train_samples:`, so 0 falls back to train_iters * gbs (also 0).
  if (training.train_samples && *training.train_samples > 0)
    schedule.train_samples = training.train_samples;
  schedule.global_batch_size = global_batch_size;
  schedule.eval_interval = training.eval_interval;
  schedule.eval_iters = training.eval_iters;
  return data::samples_per_split(schedule);
}

}  // namespace megatron::train
