// Megatron's OptimizerParamScheduler: learning rate (warm-up, then decay) and weight-decay
// increment as functions of the number of samples consumed, and how training.* keys define them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace megatron::config {
struct TrainingConfig;
}

namespace megatron::train {

enum class LrDecayStyle { constant, linear, cosine, inverse_square_root, wsd };
// The annealing curve of WSD's last `wsd_decay_steps` (Megatron's --lr-wsd-decay-style).
enum class WsdDecayStyle { exponential, linear, cosine, minus_sqrt };
enum class WdIncrStyle { constant, linear, cosine };

// Config spellings: "constant" "linear" "cosine" "inverse-square-root" "WSD"; "exponential"
// "linear" "cosine" "minus_sqrt"; "constant" "linear" "cosine". Unknown names throw ConfigError.
LrDecayStyle parse_lr_decay_style(std::string_view name);
WsdDecayStyle parse_wsd_decay_style(std::string_view name);
WdIncrStyle parse_wd_incr_style(std::string_view name);
std::string_view to_string(LrDecayStyle style);
std::string_view to_string(WsdDecayStyle style);
std::string_view to_string(WdIncrStyle style);

// Every length is in samples (Megatron's "steps"): each successful iteration advances the schedule
// by the global batch size it consumed.
struct LrScheduleConfig {
  double init_lr = 0.0;  // lr_warmup_init: where warm-up starts
  double max_lr = 0.0;
  double min_lr = 0.0;
  // Fractional when derived from lr_warmup_fraction, exactly as Megatron keeps it (a float).
  double warmup_steps = 0.0;
  std::int64_t decay_steps = 0;
  LrDecayStyle decay_style = LrDecayStyle::linear;
  std::optional<std::int64_t> wsd_decay_steps;  // required for WSD
  WsdDecayStyle wsd_decay_style = WsdDecayStyle::exponential;
  double start_wd = 0.0;
  double end_wd = 0.0;
  std::int64_t wd_incr_steps = 0;
  WdIncrStyle wd_incr_style = WdIncrStyle::constant;
};

// Value type; lr() and weight_decay() are pure, so concurrent readers are safe. step() mutates.
class OptimizerParamScheduler {
 public:
  // Checks Megatron's constructor asserts (0 <= min_lr <= max_lr, init_lr <= max_lr, decay_steps >
  // 0, warmup_steps < decay_steps, WSD has wsd_decay_steps, 0 <= start_wd <= end_wd, constant
  // increment has start_wd == end_wd) and throws ConfigError naming the training.* keys.
  explicit OptimizerParamScheduler(LrScheduleConfig config);

  // Learning rate after `num_steps` samples (Megatron's get_lr with num_steps set).
  double lr(std::int64_t num_steps) const;
  // Weight decay after `num_steps` samples (Megatron's get_wd), before any per-group wd_mult.
  double weight_decay(std::int64_t num_steps) const;

  // Megatron's step(increment): the samples the last successful iteration consumed. Skipped
  // iterations (fp16 overflow) do not step.
  void step(std::int64_t increment) { num_steps_ += increment; }
  std::int64_t num_steps() const { return num_steps_; }
  void set_num_steps(std::int64_t num_steps) { num_steps_ = num_steps; }  // checkpoint resume
  double current_lr() const { return lr(num_steps_); }
  double current_weight_decay() const { return weight_decay(num_steps_); }

  const LrScheduleConfig& config() const { return config_; }

 private:
  LrScheduleConfig config_;
  std::int64_t num_steps_ = 0;
};

// Megatron's get_optimizer_param_scheduler (training.py) turned into lengths in samples:
// - train_iters > 0: decay = (lr_decay_iters or train_iters) x gbs, weight-decay increment over
//   train_iters x gbs, WSD annealing lr_wsd_decay_iters x gbs, warm-up lr_warmup_fraction x decay
//   or lr_warmup_iters x gbs;
// - train_samples > 0: decay = lr_decay_samples or train_samples, increment over train_samples,
//   WSD lr_wsd_decay_samples, warm-up lr_warmup_fraction x decay or lr_warmup_samples.
// Weight decay is weight_decay throughout for the constant style, else start/end_weight_decay.
// `global_batch_size` is the resolved (final) global batch size; sample-based training does not
// use it. Throws ConfigError when lr is unset, neither length is positive, or an assert fails.
LrScheduleConfig lr_schedule_config(const config::TrainingConfig& training,
                                    std::int64_t global_batch_size);
OptimizerParamScheduler make_optimizer_param_scheduler(const config::TrainingConfig& training,
                                                       std::int64_t global_batch_size);

}  // namespace megatron::train
