// Megatron's OptimizerParamScheduler (megatron/core/optimizer_param_scheduler.py) and the lengths
// get_optimizer_param_scheduler (training.py) gives it, in samples.
#include "megatron/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "megatron/config/core_config.h"
#include "megatron/config/value.h"
#include "megatron/error.h"

namespace megatron::train {

namespace {

std::string num(double v) {
  return config::format_value(v);
}

[[noreturn]] void refuse(const std::string& message) {
  throw ConfigError(message);
}

}  // namespace

LrDecayStyle parse_lr_decay_style(std::string_view name) {
  if (name == "constant") return LrDecayStyle::constant;
  if (name == "linear") return LrDecayStyle::linear;
  if (name == "cosine") return LrDecayStyle::cosine;
  if (name == "inverse-square-root") return LrDecayStyle::inverse_square_root;
  if (name == "WSD") return LrDecayStyle::wsd;
  refuse("training.lr_decay_style: \"" + std::string(name) +
         "\" is not one of constant, linear, cosine, inverse-square-root, WSD");
}

WsdDecayStyle parse_wsd_decay_style(std::string_view name) {
  if (name == "exponential") return WsdDecayStyle::exponential;
  if (name == "linear") return WsdDecayStyle::linear;
  if (name == "cosine") return WsdDecayStyle::cosine;
  if (name == "minus_sqrt") return WsdDecayStyle::minus_sqrt;
  refuse("training.lr_wsd_decay_style: \"" + std::string(name) +
         "\" is not one of exponential, linear, cosine, minus_sqrt");
}

WdIncrStyle parse_wd_incr_style(std::string_view name) {
  if (name == "constant") return WdIncrStyle::constant;
  if (name == "linear") return WdIncrStyle::linear;
  if (name == "cosine") return WdIncrStyle::cosine;
  refuse("training.weight_decay_incr_style: \"" + std::string(name) +
         "\" is not one of constant, linear, cosine");
}

std::string_view to_string(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::constant:
      return "constant";
    case LrDecayStyle::linear:
      return "linear";
    case LrDecayStyle::cosine:
      return "cosine";
    case LrDecayStyle::inverse_square_root:
      return "inverse-square-root";
    case LrDecayStyle::wsd:
      return "WSD";
  }
  return "?";
}

std::string_view to_string(WsdDecayStyle style) {
  switch (style) {
    case WsdDecayStyle::exponential:
      return "exponential";
    case WsdDecayStyle::linear:
      return "linear";
    case WsdDecayStyle::cosine:
      return "cosine";
    case WsdDecayStyle::minus_sqrt:
      return "minus_sqrt";
  }
  return "?";
}

std::string_view to_string(WdIncrStyle style) {
  switch (style) {
    case WdIncrStyle::constant:
      return "constant";
    case WdIncrStyle::linear:
      return "linear";
    case WdIncrStyle::cosine:
      return "cosine";
  }
  return "?";
}

OptimizerParamScheduler::OptimizerParamScheduler(LrScheduleConfig config)
    : config_(std::move(config)) {
  const auto& c = config_;
  if (!(c.min_lr >= 0.0)) refuse("training.min_lr (" + num(c.min_lr) + ") must be >= 0");
  if (!(c.max_lr >= c.min_lr)) {
    refuse("training.min_lr (" + num(c.min_lr) + ") is larger than training.lr (" + num(c.max_lr) +
           ")");
  }
  if (!(c.init_lr <= c.max_lr)) {
    refuse("training.lr_warmup_init (" + num(c.init_lr) + ") is larger than training.lr (" +
           num(c.max_lr) + ")");
  }
  if (c.decay_steps <= 0) {
    refuse("the learning rate decays over " + std::to_string(c.decay_steps) +
           " samples; it must be positive (training.lr_decay_iters or lr_decay_samples, by "
           "default train_iters or train_samples)");
  }
  if (!(c.warmup_steps < static_cast<double>(c.decay_steps))) {
    refuse("learning-rate warm-up (" + num(c.warmup_steps) +
           " samples) must be shorter than the decay span (" + std::to_string(c.decay_steps) +
           " samples): lower training.lr_warmup_iters, lr_warmup_samples or lr_warmup_fraction, "
           "or raise lr_decay_iters or lr_decay_samples");
  }
  if (c.decay_style == LrDecayStyle::wsd && !c.wsd_decay_steps) {
    refuse(
        "training.lr_decay_style \"WSD\" needs its annealing span: set lr_wsd_decay_iters "
        "(with train_iters) or lr_wsd_decay_samples (with train_samples)");
  }
  if (!(c.start_wd >= 0.0)) {
    refuse("training.start_weight_decay (" + num(c.start_wd) + ") must be >= 0");
  }
  if (!(c.end_wd >= c.start_wd)) {
    refuse("training.end_weight_decay (" + num(c.end_wd) +
           ") is smaller than training.start_weight_decay (" + num(c.start_wd) + ")");
  }
  // Megatron asserts this only when get_wd runs; checking here fails before training starts.
  if (c.wd_incr_style == WdIncrStyle::constant && c.start_wd != c.end_wd) {
    refuse("training.weight_decay_incr_style \"constant\" needs start_weight_decay (" +
           num(c.start_wd) + ") equal to end_weight_decay (" + num(c.end_wd) + ")");
  }
}

// The arithmetic below keeps Megatron's operation order so results match it bit for bit.
double OptimizerParamScheduler::lr(std::int64_t num_steps) const {
  const auto& c = config_;
  const double n = static_cast<double>(num_steps);
  // The warm-up branch includes its last step (<=), as Megatron's.
  if (c.warmup_steps > 0 && n <= c.warmup_steps) {
    return c.init_lr + ((c.max_lr - c.init_lr) * n / c.warmup_steps);
  }
  if (c.decay_style == LrDecayStyle::constant) return c.max_lr;
  if (num_steps > c.decay_steps) return c.min_lr;
  if (c.decay_style == LrDecayStyle::inverse_square_root) {
    const double warmup = std::max(c.warmup_steps, 1.0);
    const double steps = std::max(n, 1.0);
    const double value = c.max_lr * std::pow(warmup, 0.5) / std::pow(steps, 0.5);
    return std::max(c.min_lr, value);
  }
  const double decay_ratio =
      (n - c.warmup_steps) / (static_cast<double>(c.decay_steps) - c.warmup_steps);
  const double delta_lr = c.max_lr - c.min_lr;
  double coeff = 1.0;
  switch (c.decay_style) {
    case LrDecayStyle::linear:
      coeff = 1.0 - decay_ratio;
      break;
    case LrDecayStyle::cosine:
      coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0);
      break;
    case LrDecayStyle::wsd: {
      const std::int64_t wsd_steps_total = *c.wsd_decay_steps;
      const std::int64_t anneal_start = c.decay_steps - wsd_steps_total;
      if (num_steps <= anneal_start) {
        coeff = 1.0;
      } else {
        const double r =
            static_cast<double>(num_steps - anneal_start) / static_cast<double>(wsd_steps_total);
        switch (c.wsd_decay_style) {
          case WsdDecayStyle::linear:
            coeff = 1.0 - r;
            break;
          case WsdDecayStyle::cosine:
            coeff = 0.5 * (std::cos(std::numbers::pi * r) + 1.0);
            break;
          case WsdDecayStyle::exponential:
            coeff = (2.0 * std::pow(0.5, r)) - 1.0;
            break;
          case WsdDecayStyle::minus_sqrt:
            coeff = 1.0 - std::sqrt(r);
            break;
        }
      }
      break;
    }
    case LrDecayStyle::constant:
    case LrDecayStyle::inverse_square_root:
      break;  // returned above
  }
  return c.min_lr + coeff * delta_lr;
}

double OptimizerParamScheduler::weight_decay(std::int64_t num_steps) const {
  const auto& c = config_;
  if (num_steps > c.wd_incr_steps) return c.end_wd;
  if (c.wd_incr_style == WdIncrStyle::constant) return c.end_wd;
  const double ratio = static_cast<double>(num_steps) / static_cast<double>(c.wd_incr_steps);
  const double delta_wd = c.end_wd - c.start_wd;
  const double coeff = c.wd_incr_style == WdIncrStyle::linear
                           ? ratio
                           : 0.5 * (std::cos(std::numbers::pi * (1 - ratio)) + 1.0);
  return c.start_wd + coeff * delta_wd;
}

LrScheduleConfig lr_schedule_config(const config::TrainingConfig& t,
                                    std::int64_t global_batch_size) {
  if (!t.lr) refuse("training.lr: the peak learning rate is not set; training needs it");
  LrScheduleConfig c;
  c.init_lr = t.lr_warmup_init;
  c.max_lr = *t.lr;
  c.min_lr = t.min_lr;
  c.decay_style = parse_lr_decay_style(t.lr_decay_style);
  c.wsd_decay_style = parse_wsd_decay_style(t.lr_wsd_decay_style);
  c.wd_incr_style = parse_wd_incr_style(t.weight_decay_incr_style);

  // Megatron tests `if args.train_iters:` first, so train_iters = 0 falls through to samples.
  if (t.train_iters && *t.train_iters > 0) {
    if (global_batch_size <= 0) {
      refuse("the global batch size (" + std::to_string(global_batch_size) +
             ") must be positive to count the learning-rate schedule in samples");
    }
    const std::int64_t gbs = global_batch_size;
    c.decay_steps = t.lr_decay_iters.value_or(*t.train_iters) * gbs;
    c.wd_incr_steps = *t.train_iters * gbs;
    if (t.lr_wsd_decay_iters) c.wsd_decay_steps = *t.lr_wsd_decay_iters * gbs;
    c.warmup_steps = t.lr_warmup_fraction
                         ? *t.lr_warmup_fraction * static_cast<double>(c.decay_steps)
                         : static_cast<double>(t.lr_warmup_iters * gbs);
  } else if (t.train_samples && *t.train_samples > 0) {
    c.decay_steps = t.lr_decay_samples.value_or(*t.train_samples);
    c.wd_incr_steps = *t.train_samples;
    c.wsd_decay_steps = t.lr_wsd_decay_samples;
    c.warmup_steps = t.lr_warmup_fraction
                         ? *t.lr_warmup_fraction * static_cast<double>(c.decay_steps)
                         : static_cast<double>(t.lr_warmup_samples);
  } else {
    refuse(
        "training.train_iters / training.train_samples: the learning-rate schedule needs one "
        "of them set to a positive number");
  }

  if (c.wd_incr_style == WdIncrStyle::constant) {
    c.start_wd = t.weight_decay;
    c.end_wd = t.weight_decay;
  } else {
    if (!t.start_weight_decay || !t.end_weight_decay) {
      refuse("training.weight_decay_incr_style \"" + t.weight_decay_incr_style +
             "\" needs start_weight_decay and end_weight_decay");
    }
    c.start_wd = *t.start_weight_decay;
    c.end_wd = *t.end_weight_decay;
  }
  return c;
}

OptimizerParamScheduler make_optimizer_param_scheduler(const config::TrainingConfig& training,
                                                       std::int64_t global_batch_size) {
  return OptimizerParamScheduler(lr_schedule_config(training, global_batch_size));
}

}  // namespace megatron::train
