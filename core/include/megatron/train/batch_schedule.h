// Megatron's number-of-micro-batches calculators (constant and batch-size ramp-up) and
// update_train_iters: global batch size and gradient-accumulation steps per consumed-sample count.
#pragma once

#include <cstdint>

namespace megatron::config {
struct TrainingConfig;
}

namespace megatron::train {

// The batch the next iteration runs once `consumed_samples` samples have been trained on.
struct BatchSizes {
  std::int64_t global_batch_size = 0;  // Megatron's current global batch size (the schedule's)
  // What actually runs: global_batch_size rounded down to a multiple of micro x data-parallel when
  // decrease_batch_size_if_needed is on, else equal to it.
  std::int64_t running_global_batch_size = 0;
  std::int64_t num_micro_batches = 0;  // per data-parallel rank
  bool operator==(const BatchSizes&) const = default;
};

// Immutable value type; safe to share between threads.
class BatchSchedule {
 public:
  // ConstantNumMicroBatchesCalculator: refuses (ConfigError) a global batch that is not a multiple
  // of micro_batch_size x data_parallel_size, unless decrease_batch_size_if_needed rounds it down;
  // at least one micro-batch either way.
  BatchSchedule(std::int64_t global_batch_size, std::int64_t micro_batch_size,
                std::int64_t data_parallel_size, bool decrease_batch_size_if_needed = false);

  // RampupBatchsizeNumMicroBatchesCalculator (--rampup-batch-size start increment samples): the
  // batch grows from `start` by `increment` (global - start) / increment times, evenly spaced over
  // `rampup_samples` samples: start + int(consumed / (rampup_samples / increments)) x increment,
  // then `global_batch_size` once consumed > rampup_samples. Refuses (ConfigError) what Megatron
  // asserts: non-positive sizes, start > global, global - start not a multiple of increment; and
  // what would divide by zero there: start == global, rampup_samples == 0.
  static BatchSchedule rampup(std::int64_t start_global_batch_size,
                              std::int64_t batch_size_increment, std::int64_t rampup_samples,
                              std::int64_t global_batch_size, std::int64_t micro_batch_size,
                              std::int64_t data_parallel_size,
                              bool decrease_batch_size_if_needed = false);

  // From [training]: rampup_batch_size when given, else constant; the global batch size is
  // resolve_global_batch_size's.
  static BatchSchedule from_config(const config::TrainingConfig& training,
                                   std::int64_t data_parallel_size);

  // Megatron's update(consumed_samples, consistency_check) then get()/get_current_global_batch_
  // size(). With the check (as in the training loop), a ramp-up batch that is not a multiple of
  // micro x data-parallel throws ConfigError; update_train_iters runs without it.
  BatchSizes at(std::int64_t consumed_samples, bool consistency_check = true) const;
  std::int64_t global_batch_size_at(std::int64_t consumed_samples) const {
    return at(consumed_samples, false).global_batch_size;
  }
  std::int64_t num_micro_batches_at(std::int64_t consumed_samples) const {
    return at(consumed_samples).num_micro_batches;
  }

  bool has_rampup() const { return rampup_; }
  std::int64_t global_batch_size() const { return global_batch_size_; }  // after any ramp-up
  std::int64_t micro_batch_size() const { return micro_batch_size_; }
  std::int64_t data_parallel_size() const { return data_parallel_size_; }
  std::int64_t start_global_batch_size() const { return start_; }
  std::int64_t batch_size_increment() const { return increment_; }
  std::int64_t rampup_samples() const { return rampup_samples_; }

 private:
  BatchSchedule() = default;

  bool rampup_ = false;
  bool decrease_if_needed_ = false;
  std::int64_t global_batch_size_ = 0;
  std::int64_t micro_batch_size_ = 0;
  std::int64_t data_parallel_size_ = 0;
  std::int64_t start_ = 0;
  std::int64_t increment_ = 0;
  std::int64_t rampup_samples_ = 0;
  double rampup_samples_per_increment_ = 0.0;
};

// training.global_batch_size, or Megatron's default micro_batch_size x data_parallel_size.
std::int64_t resolve_global_batch_size(const config::TrainingConfig& training,
                                       std::int64_t data_parallel_size);

// Megatron's update_train_iters: train_iters when set; else train_samples // global batch; with
// ramp-up, one iteration per batch while consumed <= rampup_samples (each taking the ramp's batch
// at that count, so the iteration that crosses the threshold is counted in the ramp), then
// (train_samples - consumed) // global batch (Python floor division; the partial batch is
// dropped). Throws ConfigError when neither train_iters nor train_samples is set.
std::int64_t update_train_iters(const config::TrainingConfig& training,
                                const BatchSchedule& schedule);

}  // namespace megatron::train
