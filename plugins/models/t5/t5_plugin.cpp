// The `t5` model plugin's descriptor: the shared transformer [model] keys and T5's own.
#include "t5_model.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<megatron::t5::T5Model>(megatron::t5::parse_t5_config(ctx.config));
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::model, "t5", "1.0.0",
      "Megatron-core T5 (bidirectional encoder, causal decoder with cross-attention, shared "
      "embedding, tied LM head with bias; learned, rope or relative positions)",
      megatron::t5::declare_t5_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
