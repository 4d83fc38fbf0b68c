// The `gpt` model plugin's descriptor: the shared transformer [model] keys, nothing else.
#include "gpt_model.h"

namespace {

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<megatron::gpt::GptModel>(megatron::nn::parse_model_config(ctx.config));
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::model, "gpt", "2.0.0",
      "Megatron-core GPT (learned or rotary positions, GQA, GeLU/SwiGLU, LayerNorm/RMSNorm)",
      megatron::nn::declare_model_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
