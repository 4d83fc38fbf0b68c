// Dataset plugin `bert` ([data] type = "bert"): Megatron-LM's BERT pretraining samples (masked
// whole-word n-grams, sentence-order pairs) from a sentence-level indexed dataset.
#include <memory>

#include "bert_dataset.h"
#include "bert_options.h"
#include "megatron/plugin.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& context) {
  return std::make_unique<megatron::bert_data::BertDataset>(context);
}

megatron::PlannedSamples plan(const megatron::config::ConfigTable& table,
                              const megatron::config::CoreConfig& core) {
  using namespace megatron::bert_data;
  const BertDataOptions options = read_bert_data_options(table, core);
  return {options.sample.sequence_length,
          static_cast<std::int64_t>(
              megatron::data::open_masked_data_tokenizer(table, options)->vocab_size()),
          bert_sample_fields(options)};
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::dataset, "bert", "1.0.0",
      "Megatron BERTMaskedWordPieceDataset samples from a sentence-level indexed dataset",
      megatron::bert_data::declare_bert_data_config, create, plan);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
