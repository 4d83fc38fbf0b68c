// ParameterSet: ordered, named parameters with stable addresses.
#include "megatron/nn/parameter.h"

#include "megatron/error.h"

namespace megatron {

Parameter& ParameterSet::add(Parameter p) {
  if (find(p.name)) throw Error("parameter '" + p.name + "' declared twice");
  params_.push_back(std::make_unique<Parameter>(std::move(p)));
  return *params_.back();
}

Parameter* ParameterSet::find(const std::string& name) {
  for (auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

const Parameter* ParameterSet::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

std::int64_t ParameterSet::numel() const {
  std::int64_t n = 0;
  for (const auto& p : params_)
    n += shape_numel(p->value.defined() ? p->value.shape() : p->global_shape);
  return n;
}

}  // namespace megatron
