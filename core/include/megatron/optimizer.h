// The interface of optimizer plugins: one update of fp32 master parameters from their gradients,
// with state the checkpoint saves by name.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "megatron/nn/parameter.h"
#include "megatron/plugin.h"

namespace megatron {

struct OptimizerStep {
  double lr = 0;
  double weight_decay = 0;  // applied only to parameters with Parameter::weight_decay
  std::int64_t step = 1;    // 1-based count of applied (not skipped) updates
};

class Optimizer : public Plugin {
 public:
  ~Optimizer() override;
  // Allocates state for these parameters (called once, after the model is built).
  virtual void attach(ParameterSet& params) = 0;
  // Updates every parameter from its grad (already unscaled and clipped).
  virtual void step(ParameterSet& params, const OptimizerStep& step) = 0;
  // State tensors by "<state name>/<param name>", e.g. "exp_avg/output_layer.weight"; the
  // tensors are the live state, so a checkpoint load copies into them.
  virtual std::map<std::string, Tensor> state() = 0;
};

}  // namespace megatron
