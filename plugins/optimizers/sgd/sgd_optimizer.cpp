// The `sgd` optimizer plugin: torch.optim.SGD with momentum and L2 weight decay coupled into the
// gradient, as Megatron's --optimizer sgd; no decay on biases and norm weights.
#include <map>
#include <memory>
#include <string>

#include "megatron/backend/backend.h"
#include "megatron/optimizer.h"

namespace {

class SgdOptimizer : public megatron::Optimizer {
 public:
  explicit SgdOptimizer(const megatron::config::ConfigTable& t)
      : momentum_(t.real("sgd_momentum")) {}

  void attach(megatron::ParameterSet& params) override {
    if (momentum_ == 0) return;
    for (auto& p : params) {
      megatron::Backend& be = megatron::backend_for(p->value.device());
      megatron::Tensor buf = be.empty(p->value.shape(), p->value.dtype());
      be.fill(buf, 0.0);
      momentum_buffer_.emplace(p->name, std::move(buf));
    }
  }

  void step(megatron::ParameterSet& params, const megatron::OptimizerStep& step) override {
    for (auto& p : params) {
      megatron::SgdParams s;
      s.lr = static_cast<float>(step.lr);
      s.momentum = static_cast<float>(momentum_);
      s.weight_decay = p->weight_decay ? static_cast<float>(step.weight_decay) : 0.0f;
      megatron::Tensor* buf = momentum_ == 0 ? nullptr : &momentum_buffer_.at(p->name);
      megatron::backend_for(p->value.device()).sgd_step(p->value, p->grad, buf, s);
    }
  }

  std::map<std::string, megatron::Tensor> state() override {
    std::map<std::string, megatron::Tensor> out;
    for (auto& [name, buf] : momentum_buffer_)
      out.emplace("momentum_buffer/" + name, buf);
    return out;
  }

 private:
  double momentum_;
  std::map<std::string, megatron::Tensor> momentum_buffer_;
};

void declare_config(megatron::config::TableSchema& s) {
  s.real("sgd_momentum", 0.9, "momentum factor (0: plain SGD)", {0.0, 1.0, false, true});
}

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<SgdOptimizer>(ctx.config);
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::optimizer, "sgd", "1.0.0", "SGD with momentum (torch.optim.SGD)",
      declare_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
