// Dataset plugin `gpt` ([data] type = "gpt"): Megatron-LM's GPT pretraining samples from indexed
// datasets, with its splits, blends, sample order and index cache files.
#include <memory>

#include "gpt_dataset.h"
#include "gpt_options.h"
#include "megatron/plugin.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& context) {
  return std::make_unique<megatron::gpt_data::GptDataset>(context);
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::dataset, "gpt", "1.0.0",
      "Megatron GPT samples from indexed datasets: splits, weighted blends, cached sample order",
      megatron::gpt_data::declare_gpt_data_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
