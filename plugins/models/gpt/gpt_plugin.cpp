// The `gpt` model plugin's descriptor: the shared transformer [model] keys and the MoE keys.
#include "gpt_model.h"

namespace {

// The shared transformer keys and Mixture of Experts' (num_experts, moe_*).
void declare_gpt_config(megatron::config::TableSchema& schema) {
  megatron::nn::declare_model_config(schema);
  megatron::nn::declare_moe_config(schema);
}

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  megatron::gpt::GptConfig c = megatron::nn::parse_model_config(ctx.config);
  c.transformer.moe = megatron::nn::parse_moe_config(ctx.config, c.transformer.num_layers,
                                                     c.transformer.ffn_hidden_size);
  return std::make_unique<megatron::gpt::GptModel>(std::move(c));
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::model, "gpt", "2.0.0",
      "Megatron-core GPT (learned or rotary positions, GQA, GeLU/SwiGLU, LayerNorm/RMSNorm, "
      "Mixture of Experts)",
      declare_gpt_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
