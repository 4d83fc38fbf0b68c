// Dataset plugin `t5` ([data] type = "t5"): Megatron-LM's T5 pretraining samples (whole-word
// span masking with sentinels, encoder and decoder sequences) from a sentence-level indexed
// dataset.
#include <memory>

#include "megatron/plugin.h"
#include "t5_dataset.h"
#include "t5_options.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& context) {
  return std::make_unique<megatron::t5_data::T5Dataset>(context);
}

megatron::PlannedSamples plan(const megatron::config::ConfigTable& table,
                              const megatron::config::CoreConfig& core) {
  using namespace megatron::t5_data;
  const T5DataOptions options = read_t5_data_options(table, core);
  return {options.sample.encoder_length,
          static_cast<std::int64_t>(
              megatron::data::open_masked_data_tokenizer(table, options)->vocab_size()),
          t5_sample_fields(options)};
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::dataset, "t5", "1.0.0",
      "Megatron T5MaskedWordPieceDataset samples from a sentence-level indexed dataset",
      megatron::t5_data::declare_t5_data_config, create, plan);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
