// The `retro` model plugin's descriptor: Megatron-core's RetroModel.
#include "retro_model.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<megatron::retro::RetroModel>(
      megatron::retro::parse_retro_config(ctx.config));
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::model, "retro", "1.0.0",
      "Megatron-core RetroModel: GPT with chunked cross-attention to retrieved neighbours and "
      "a retrieval encoder",
      megatron::retro::declare_retro_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
