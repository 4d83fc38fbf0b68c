// Megatron's ConstantGradScaler and DynamicGradScaler, with its asserts as ConfigErrors.
#include "megatron/train/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "megatron/config/core_config.h"
#include "megatron/config/value.h"
#include "megatron/error.h"

namespace megatron::train {

namespace {

std::string num(double v) {
  return config::format_value(v);
}

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}

// The scale is an fp32 tensor in Megatron; converting a larger double is undefined in C++, so
// this runs before any conversion.
float to_fp32(double v, const char* key) {
  require(std::abs(v) <= std::numeric_limits<float>::max(),
          std::string(key) + " (" + num(v) + ") does not fit in fp32, which holds the loss scale");
  return static_cast<float>(v);
}

}  // namespace

LossScaler::LossScaler(float initial_scale) : scale_(initial_scale) {}
LossScaler::~LossScaler() = default;

ConstantLossScaler::ConstantLossScaler(double scale)
    : LossScaler(to_fp32(scale, "training.loss_scale")) {
  require(scale > 0.0, "training.loss_scale (" + num(scale) + ") must be > 0");
}

DynamicLossScaler::DynamicLossScaler(const DynamicLossScalerOptions& o)
    : LossScaler(to_fp32(o.initial_scale, "training.initial_loss_scale")),
      min_scale_(to_fp32(o.min_scale, "training.min_loss_scale")),
      growth_factor_(static_cast<float>(o.growth_factor)),
      backoff_factor_(static_cast<float>(o.backoff_factor)),
      growth_interval_(o.growth_interval),
      hysteresis_(o.hysteresis),
      hysteresis_tracker_(o.hysteresis) {
  require(o.initial_scale > 0.0,
          "training.initial_loss_scale (" + num(o.initial_scale) + ") must be > 0");
  require(o.min_scale > 0.0, "training.min_loss_scale (" + num(o.min_scale) + ") must be > 0");
  require(o.min_scale <= o.initial_scale, "training.min_loss_scale (" + num(o.min_scale) +
                                              ") is larger than initial_loss_scale (" +
                                              num(o.initial_scale) + ")");
  require(o.growth_factor > 1.0,
          "loss-scale growth factor (" + num(o.growth_factor) + ") must be > 1");
  require(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
          "loss-scale back-off factor (" + num(o.backoff_factor) + ") must be in (0, 1)");
  require(o.growth_interval > 0,
          "training.loss_scale_window (" + std::to_string(o.growth_interval) + ") must be > 0");
  require(o.hysteresis > 0,
          "training.hysteresis (" + std::to_string(o.hysteresis) + ") must be > 0");
}

void DynamicLossScaler::update(bool found_inf) {
  if (found_inf) {
    growth_tracker_ = 0;
    hysteresis_tracker_ -= 1;
    if (hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * backoff_factor_, min_scale_);
  } else {
    growth_tracker_ += 1;
    if (growth_tracker_ == growth_interval_) {
      growth_tracker_ = 0;
      hysteresis_tracker_ = hysteresis_;
      scale_ = scale_ * growth_factor_;
    }
  }
}

void DynamicLossScaler::load_state(const LossScalerState& state) {
  scale_ = state.scale;
  growth_tracker_ = state.growth_tracker;
  hysteresis_tracker_ = state.hysteresis_tracker;
}

std::unique_ptr<LossScaler> make_loss_scaler(const config::TrainingConfig& t) {
  if (!t.fp16 && !t.bf16) return nullptr;  // fp32: Megatron's FP32Optimizer has no scaler
  if (t.loss_scale) return std::make_unique<ConstantLossScaler>(*t.loss_scale);
  if (!t.fp16) return nullptr;  // bf16 needs no scaling
  DynamicLossScalerOptions o;
  o.initial_scale = t.initial_loss_scale;
  o.min_scale = t.min_loss_scale;
  o.growth_interval = t.loss_scale_window;
  o.hysteresis = t.hysteresis;
  return std::make_unique<DynamicLossScaler>(o);
}

}  // namespace megatron::train
