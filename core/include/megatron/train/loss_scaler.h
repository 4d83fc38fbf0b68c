// Megatron's grad scalers for fp16 (megatron/core/optimizer/grad_scaler.py): a constant scale and
// the dynamic scale that backs off on overflow (with hysteresis) and grows after a clean window.
#pragma once

#include <cstdint>
#include <memory>

namespace megatron::config {
struct TrainingConfig;
}

namespace megatron::train {

// What a checkpoint keeps (Megatron's state_dict: scale, growth_tracker, hysteresis_tracker).
struct LossScalerState {
  float scale = 1.0f;
  std::int64_t growth_tracker = 0;
  std::int64_t hysteresis_tracker = 0;
  bool operator==(const LossScalerState&) const = default;
};

// Not thread-safe: one owner (the optimizer step) calls update() once per iteration.
// The scale is fp32, as Megatron's scale tensor, so growth and back-off round as there.
class LossScaler {
 public:
  virtual ~LossScaler();
  float scale() const { return scale_; }
  // Megatron's inv_scale: the reciprocal computed in double, then rounded to fp32.
  float inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale_)); }
  // Called after every step with whether any gradient held inf/nan (the step is then skipped).
  virtual void update(bool found_inf) = 0;
  virtual bool is_dynamic() const = 0;
  virtual LossScalerState state() const = 0;
  virtual void load_state(const LossScalerState& state) = 0;

 protected:
  explicit LossScaler(float initial_scale);
  float scale_;
};

// --loss-scale X: never changes. Its Megatron state is empty, so load_state keeps the configured
// scale (the config wins on resume); state() reports the scale with zero trackers.
class ConstantLossScaler final : public LossScaler {
 public:
  // Throws ConfigError unless scale > 0 (training.loss_scale).
  explicit ConstantLossScaler(double scale);
  void update(bool /*found_inf*/) override {}
  bool is_dynamic() const override { return false; }
  LossScalerState state() const override { return {scale_, 0, 0}; }
  void load_state(const LossScalerState& /*state*/) override {}
};

struct DynamicLossScalerOptions {
  double initial_scale = 4294967296.0;  // 2^32, training.initial_loss_scale
  double min_scale = 1.0;               // training.min_loss_scale
  double growth_factor = 2.0;           // fixed in Megatron's optimizer setup
  double backoff_factor = 0.5;          // fixed in Megatron's optimizer setup
  std::int64_t growth_interval = 1000;  // training.loss_scale_window
  std::int64_t hysteresis = 2;          // training.hysteresis
};

// Megatron's DynamicGradScaler.update(found_inf):
// - overflow: growth tracker := 0, hysteresis tracker -= 1, and when it is <= 0 the scale becomes
//   max(scale x backoff, min_scale) -- on this and every further overflow until the next growth;
// - clean step: growth tracker += 1; at growth_interval both trackers reset (hysteresis tracker
//   back to `hysteresis`) and the scale is multiplied by growth_factor. A clean step alone does
//   not restore the hysteresis tracker.
class DynamicLossScaler final : public LossScaler {
 public:
  // Throws ConfigError for Megatron's asserts: initial > 0, 0 < min <= initial, growth > 1,
  // 0 < backoff < 1, growth_interval > 0, hysteresis > 0.
  explicit DynamicLossScaler(const DynamicLossScalerOptions& options);
  void update(bool found_inf) override;
  bool is_dynamic() const override { return true; }
  LossScalerState state() const override { return {scale_, growth_tracker_, hysteresis_tracker_}; }
  void load_state(const LossScalerState& state) override;

  std::int64_t growth_tracker() const { return growth_tracker_; }
  std::int64_t hysteresis_tracker() const { return hysteresis_tracker_; }

 private:
  float min_scale_;
  float growth_factor_;
  float backoff_factor_;
  std::int64_t growth_interval_;
  std::int64_t hysteresis_;
  std::int64_t growth_tracker_ = 0;
  std::int64_t hysteresis_tracker_;
};

// The scaler Megatron's optimizer setup picks: fp16 or bf16 with loss_scale -> constant; fp16
// without -> dynamic from initial_loss_scale, min_loss_scale, loss_scale_window, hysteresis
// (growth 2, back-off 0.5); otherwise none (nullptr; the logged loss scale is then 1.0).
std::unique_ptr<LossScaler> make_loss_scaler(const config::TrainingConfig& training);

}  // namespace megatron::train
