// The `mamba` model plugin's descriptor: Mamba-2 and hybrid Mamba/attention/MLP models.
#include "mamba_model.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<megatron::mamba::MambaModel>(
      megatron::mamba::parse_mamba_config(ctx.config));
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::model, "mamba", "1.0.0",
      "Megatron-core MambaModel: Mamba-2 (SSD) layers, or a hybrid of Mamba, attention and MLP "
      "layers by pattern or ratio",
      megatron::mamba::declare_mamba_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
