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

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::dataset, "bert", "1.0.0",
      "Megatron BERTMaskedWordPieceDataset samples from a sentence-level indexed dataset",
      megatron::bert_data::declare_bert_data_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
