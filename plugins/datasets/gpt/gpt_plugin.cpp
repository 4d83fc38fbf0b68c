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

megatron::PlannedSamples plan(const megatron::config::ConfigTable& table,
                              const megatron::config::CoreConfig& core) {
  using namespace megatron::gpt_data;
  const GptDataOptions options = read_gpt_data_options(table, core);
  return {options.seq_length,
          static_cast<std::int64_t>(open_gpt_tokenizer(table, options)->vocab_size()),
          gpt_sample_fields(options)};
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::dataset, "gpt", "1.0.0",
      "Megatron GPT samples from indexed datasets: splits, weighted blends, cached sample order",
      megatron::gpt_data::declare_gpt_data_config, create, plan);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
