// The `bert` model plugin's descriptor: the shared transformer [model] keys and bert_binary_head.
#include "bert_model.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<megatron::bert::BertModel>(megatron::bert::parse_bert_config(ctx.config));
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::model, "bert", "2.0.0",
      "Megatron-core BERT (padding-masked bidirectional layers, token types, LM head, pooler and "
      "sentence-order head)",
      megatron::bert::declare_bert_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
