// Parameter declaration, initialisation and gradient zeroing.
#include "megatron/nn/init.h"

namespace megatron::nn {

Parameter& ParamFactory::declare(const std::string& name, const Shape& shape, ParamInit init,
                                 float init_std, bool weight_decay) {
  Parameter p;
  p.name = name;
  p.global_shape = shape;
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  p.value = Tensor::empty(shape, dtype, device);
  p.grad = Tensor::empty(shape, dtype, device);
  return params.add(std::move(p));
}

void initialize_parameters(Backend& backend, ParameterSet& params, std::uint64_t seed) {
  std::uint64_t index = 0;
  for (auto& p : params) {
    if (p->value.device().is_meta()) continue;
    switch (p->init) {
      case ParamInit::normal:
        backend.fill_normal(p->value, 0.0f, p->init_std, seed, index << 40);
        break;
      case ParamInit::zeros:
        backend.fill(p->value, 0.0);
        break;
      case ParamInit::ones:
        backend.fill(p->value, 1.0);
        break;
    }
    backend.fill(p->grad, 0.0);
    ++index;
  }
}

void zero_gradients(Backend& backend, ParameterSet& params) {
  for (auto& p : params)
    if (!p->grad.device().is_meta()) backend.fill(p->grad, 0.0);
}

}  // namespace megatron::nn
