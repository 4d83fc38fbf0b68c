// The `adam` optimizer plugin: Adam with decoupled weight decay (AdamW), as Megatron's default
// optimizer; fp32 moments per parameter; no decay on biases and norm weights.
#include <map>
#include <memory>
#include <string>

#include "megatron/backend/backend.h"
#include "megatron/optimizer.h"

namespace {

class AdamOptimizer : public megatron::Optimizer {
 public:
  explicit AdamOptimizer(const megatron::config::ConfigTable& t)
      : beta1_(t.real("adam_beta1")), beta2_(t.real("adam_beta2")), eps_(t.real("adam_eps")) {}

  void attach(megatron::ParameterSet& params) override {
    for (auto& p : params) {
      megatron::Backend& be = megatron::backend_for(p->value.device());
      State s{be.empty(p->value.shape(), p->value.dtype()),
              be.empty(p->value.shape(), p->value.dtype())};
      be.fill(s.exp_avg, 0.0);
      be.fill(s.exp_avg_sq, 0.0);
      state_.emplace(p->name, std::move(s));
    }
  }

  void step(megatron::ParameterSet& params, const megatron::OptimizerStep& step) override {
    for (auto& p : params) {
      State& s = state_.at(p->name);
      megatron::AdamParams a;
      a.lr = static_cast<float>(step.lr);
      a.beta1 = static_cast<float>(beta1_);
      a.beta2 = static_cast<float>(beta2_);
      a.eps = static_cast<float>(eps_);
      a.weight_decay = p->weight_decay ? static_cast<float>(step.weight_decay) : 0.0f;
      a.step = step.step;
      megatron::backend_for(p->value.device())
          .adamw_step(p->value, p->grad, s.exp_avg, s.exp_avg_sq, a);
    }
  }

  std::map<std::string, megatron::Tensor> state() override {
    std::map<std::string, megatron::Tensor> out;
    for (auto& [name, s] : state_) {
      out.emplace("exp_avg/" + name, s.exp_avg);
      out.emplace("exp_avg_sq/" + name, s.exp_avg_sq);
    }
    return out;
  }

 private:
  struct State {
    megatron::Tensor exp_avg, exp_avg_sq;
  };
  double beta1_, beta2_, eps_;
  std::map<std::string, State> state_;
};

void declare_config(megatron::config::TableSchema& s) {
  using megatron::config::Range;
  s.real("adam_beta1", 0.9, "first-moment decay", {0.0, 1.0, false, true})
      .real("adam_beta2", 0.999, "second-moment decay", {0.0, 1.0, false, true})
      .real("adam_eps", 1e-8, "denominator epsilon", Range::positive());
}

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<AdamOptimizer>(ctx.config);
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::optimizer, "adam", "1.0.0",
      "Adam with decoupled weight decay (AdamW), Megatron's default", declare_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
