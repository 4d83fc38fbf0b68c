// Dataset plugin `retro` ([data] type = "retro"): Megatron's RetroDataset, and the `retro`
// command that builds its retrieval pipeline.
#include <memory>

#include "megatron/plugin.h"
#include "retro_dataset.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& context) {
  return std::make_unique<megatron::retro_data::RetroDataset>(context);
}

// For `plan`: the GPT samples' length and vocabulary, and the neighbour field, from the table.
megatron::PlannedSamples plan(const megatron::config::ConfigTable& table,
                              const megatron::config::CoreConfig& core) {
  using namespace megatron::retro_data;
  const RetroDataOptions options = read_retro_data_options(table, core);
  return {options.gpt.seq_length,
          static_cast<std::int64_t>(
              megatron::gpt_data::open_gpt_tokenizer(table, options.gpt)->vocab_size()),
          retro_sample_fields(options)};
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::dataset, "retro", "0.1.0",
      "Megatron Retro: GPT samples with retrieved neighbours; `megatron-app retro` builds the "
      "retrieval pipeline (build-db, embed, index, query, inspect)",
      megatron::retro_data::declare_retro_data_config, create, plan);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
