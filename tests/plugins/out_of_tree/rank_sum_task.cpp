// An out-of-tree task plugin: sums (world rank + 1) x factor over every rank.
#include "megatron/parallel/parallel_state.h"
#include "megatron/plugin.h"
#include "megatron/task.h"

namespace {

class RankSum final : public megatron::Task {
 public:
  explicit RankSum(megatron::PluginContext& ctx) : ctx_(ctx), factor_(ctx.config.real("factor")) {}

  megatron::TaskResult run(megatron::TaskHost&) override {
    double value = factor_ * (ctx_.parallel.world_rank() + 1);
    value = ctx_.parallel.comm(megatron::Group::world).all_reduce_value(value);
    return {{{"rank_sum", value}, {"world_size", double(ctx_.parallel.world_size())}}};
  }

 private:
  megatron::PluginContext& ctx_;
  double factor_;
};

void declare_config(megatron::config::TableSchema& s) {
  s.real("factor", 1.0, "multiplies each rank's contribution", megatron::config::Range::positive());
}

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<RankSum>(ctx);
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor d = megatron::make_plugin_descriptor(
      megatron::PluginKind::task, "rank_sum", "2.1.0", "sums scaled ranks (out-of-tree example)",
      declare_config, create);
  return &d;
}

}  // namespace

MEGATRON_PLUGIN(describe)
