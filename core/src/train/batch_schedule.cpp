// Megatron's num-microbatches calculators (megatron/core/num_microbatches_calculator.py) and
// update_train_iters (training.py).
#include "megatron/train/batch_schedule.h"

#include <string>

#include "megatron/config/core_config.h"
#include "megatron/error.h"

namespace megatron::train {

namespace {

[[noreturn]] void refuse(const std::string& message) {
  throw ConfigError(message);
}

std::string s(std::int64_t v) {
  return std::to_string(v);
}

void check_micro_and_dp(std::int64_t micro_batch_size, std::int64_t data_parallel_size) {
  if (micro_batch_size <= 0) {
    refuse("training.micro_batch_size (" + s(micro_batch_size) + ") must be positive");
  }
  if (data_parallel_size <= 0) {
    refuse("the data-parallel size (" + s(data_parallel_size) + ") must be positive");
  }
}

// Python's // for a positive divisor (rounds towards minus infinity).
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && (a < 0)) --q;
  return q;
}

}  // namespace

BatchSchedule::BatchSchedule(std::int64_t global_batch_size, std::int64_t micro_batch_size,
                             std::int64_t data_parallel_size, bool decrease_batch_size_if_needed)
    : decrease_if_needed_(decrease_batch_size_if_needed),
      global_batch_size_(global_batch_size),
      micro_batch_size_(micro_batch_size),
      data_parallel_size_(data_parallel_size) {
  check_micro_and_dp(micro_batch_size, data_parallel_size);
  const std::int64_t unit = micro_batch_size * data_parallel_size;
  if (!decrease_batch_size_if_needed && global_batch_size % unit != 0) {
    refuse("training.global_batch_size (" + s(global_batch_size) +
           ") is not divisible by micro_batch_size (" + s(micro_batch_size) +
           ") times the data-parallel size (" + s(data_parallel_size) + ")");
  }
  if (global_batch_size / unit < 1) {
    refuse("training.global_batch_size (" + s(global_batch_size) +
           ") gives no micro-batch: it must be at least micro_batch_size (" + s(micro_batch_size) +
           ") times the data-parallel size (" + s(data_parallel_size) + ")");
  }
}

BatchSchedule BatchSchedule::rampup(std::int64_t start_global_batch_size,
                                    std::int64_t batch_size_increment, std::int64_t rampup_samples,
                                    std::int64_t global_batch_size, std::int64_t micro_batch_size,
                                    std::int64_t data_parallel_size,
                                    bool decrease_batch_size_if_needed) {
  const std::string key = "training.rampup_batch_size [" + s(start_global_batch_size) + ", " +
                          s(batch_size_increment) + ", " + s(rampup_samples) + "]: ";
  if (global_batch_size <= 0) {
    refuse("training.global_batch_size (" + s(global_batch_size) + ") must be positive");
  }
  if (start_global_batch_size <= 0) refuse(key + "the start batch size must be positive");
  if (batch_size_increment <= 0) refuse(key + "the batch size increment must be positive");
  if (rampup_samples < 0) refuse(key + "the ramp-up samples must be non-negative");
  check_micro_and_dp(micro_batch_size, data_parallel_size);
  const std::int64_t diff = global_batch_size - start_global_batch_size;
  if (diff < 0) {
    refuse(key + "the start batch size is larger than global_batch_size (" + s(global_batch_size) +
           ")");
  }
  if (diff % batch_size_increment != 0) {
    refuse(key + "global_batch_size (" + s(global_batch_size) + ") minus the start (" +
           s(start_global_batch_size) + ") must be a multiple of the increment");
  }
  // Megatron divides by both of these (ZeroDivisionError); refuse them by name instead.
  if (diff == 0) {
    refuse(key + "the start batch size equals global_batch_size (" + s(global_batch_size) +
           "), so there is nothing to ramp up; remove rampup_batch_size");
  }
  if (rampup_samples == 0) refuse(key + "the ramp-up needs a positive number of samples");

  BatchSchedule b;
  b.rampup_ = true;
  b.decrease_if_needed_ = decrease_batch_size_if_needed;
  b.global_batch_size_ = global_batch_size;
  b.micro_batch_size_ = micro_batch_size;
  b.data_parallel_size_ = data_parallel_size;
  b.start_ = start_global_batch_size;
  b.increment_ = batch_size_increment;
  b.rampup_samples_ = rampup_samples;
  // A float, as Megatron's `ramup_samples / num_increments`.
  b.rampup_samples_per_increment_ =
      static_cast<double>(rampup_samples) / static_cast<double>(diff / batch_size_increment);
  return b;
}

BatchSchedule BatchSchedule::from_config(const config::TrainingConfig& t,
                                         std::int64_t data_parallel_size) {
  const std::int64_t global = resolve_global_batch_size(t, data_parallel_size);
  if (t.rampup_batch_size.empty()) {
    return BatchSchedule(global, t.micro_batch_size, data_parallel_size);
  }
  if (t.rampup_batch_size.size() != 3) {
    refuse(
        "training.rampup_batch_size: expected 3 integers [start, increment, ramp-up samples], "
        "got " +
        s(static_cast<std::int64_t>(t.rampup_batch_size.size())));
  }
  const auto& r = t.rampup_batch_size;
  return rampup(r[0], r[1], r[2], global, t.micro_batch_size, data_parallel_size);
}

BatchSizes BatchSchedule::at(std::int64_t consumed_samples, bool consistency_check) const {
  const std::int64_t unit = micro_batch_size_ * data_parallel_size_;
  BatchSizes out;
  if (!rampup_ || consumed_samples > rampup_samples_) {
    out.global_batch_size = global_batch_size_;
  } else {
    // int(consumed / per_increment): a float division truncated, as Megatron's.
    const auto steps = static_cast<std::int64_t>(static_cast<double>(consumed_samples) /
                                                 rampup_samples_per_increment_);
    out.global_batch_size = start_ + steps * increment_;
  }
  if (rampup_ && consistency_check && !decrease_if_needed_ && out.global_batch_size % unit != 0) {
    refuse("training.rampup_batch_size: the global batch size after " + s(consumed_samples) +
           " samples (" + s(out.global_batch_size) + ") is not divisible by micro_batch_size (" +
           s(micro_batch_size_) + ") times the data-parallel size (" + s(data_parallel_size_) +
           ")");
  }
  out.running_global_batch_size = (decrease_if_needed_ && out.global_batch_size % unit != 0)
                                      ? (out.global_batch_size / unit) * unit
                                      : out.global_batch_size;
  out.num_micro_batches = out.running_global_batch_size / unit;
  return out;
}

std::int64_t resolve_global_batch_size(const config::TrainingConfig& t,
                                       std::int64_t data_parallel_size) {
  return t.global_batch_size.value_or(t.micro_batch_size * data_parallel_size);
}

std::int64_t update_train_iters(const config::TrainingConfig& t, const BatchSchedule& schedule) {
  // Megatron returns early on a truthy train_iters and would crash on train_iters = 0 without
  // train_samples; an explicit 0 here means "no training iterations".
  if (t.train_iters) return *t.train_iters;
  if (!t.train_samples) {
    refuse(
        "training.train_iters / training.train_samples: set one of them to say how long to "
        "train");
  }
  const std::int64_t train_samples = *t.train_samples;
  const std::int64_t global = schedule.global_batch_size();
  if (!schedule.has_rampup()) return floor_div(train_samples, global);

  std::int64_t iterations = 0;
  std::int64_t consumed = 0;
  while (consumed <= schedule.rampup_samples()) {
    consumed += schedule.at(consumed, false).global_batch_size;
    ++iterations;
  }
  return iterations + floor_div(train_samples - consumed, global);
}

}  // namespace megatron::train
