// Dataset plugin `retro` ([data] type = "retro"): Megatron's RetroDataset, and the `retro`
// command that builds its retrieval pipeline.
#include <memory>

#include "retro_dataset.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& context) {
  return std::make_unique<megatron::retro_data::RetroDataset>(context);
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::dataset, "retro", "0.1.0",
      "Megatron Retro: GPT samples with retrieved neighbours; `megatron-app retro` builds the "
      "retrieval pipeline (so far: build-db)",
      megatron::retro_data::declare_retro_data_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
