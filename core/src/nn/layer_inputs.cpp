// Named per-micro-batch layer inputs and their gradient accumulators.
#include "megatron/nn/layer_inputs.h"

#include "megatron/error.h"

namespace megatron::nn {

void LayerInputs::set(const std::string& name, Tensor value) {
  if (value.defined()) {
    values_[name] = std::move(value);
  } else {
    values_.erase(name);
  }
}

Tensor LayerInputs::get(const std::string& name) const {
  const auto it = values_.find(name);
  return it == values_.end() ? Tensor() : it->second;
}

const Tensor& LayerInputs::require(const std::string& name, const std::string& who) const {
  const auto it = values_.find(name);
  if (it == values_.end()) {
    throw Error(who + ": the micro-batch gave no layer input '" + name + "'");
  }
  return it->second;
}

void LayerInputs::collect_gradient(const std::string& name, Tensor accumulator) {
  if (!accumulator.defined()) {
    throw Error("layer input '" + name + "': an undefined gradient accumulator");
  }
  gradients_[name] = std::move(accumulator);
}

Tensor LayerInputs::gradient(const std::string& name, const std::string& who) const {
  const auto it = gradients_.find(name);
  if (it == gradients_.end()) {
    throw Error(who + ": the micro-batch gave nowhere to add the gradient of layer input '" + name +
                "' (LayerInputs::collect_gradient)");
  }
  return it->second;
}

void LayerInputs::set_rotary(const RotaryTables* tables) {
  set(layer_input::rotary_cos, tables ? tables->cos : Tensor());
  set(layer_input::rotary_sin, tables ? tables->sin : Tensor());
}

}  // namespace megatron::nn
