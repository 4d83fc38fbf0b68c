// The `mamba` model's [model] keys: the shared transformer keys with the defaults of Megatron's
// Mamba examples (no position embedding, untied output layer, RMSNorm), the Mamba-2 mixer's
// sizes and the hybrid layout (pattern or ratios).
#include "mamba_model.h"

namespace megatron::mamba {

void declare_mamba_config(config::TableSchema& schema) {
  using config::Range;
  nn::declare_model_config(schema);
  nn::declare_moe_config(schema);
  schema.set_default("position_embedding_type", std::string("none"));
  schema.set_default("untie_embeddings_and_output_weights", true);
  schema.set_default("normalization", std::string("RMSNorm"));
  schema.integer("mamba_state_dim", 128, "SSM state size N per group (d_state)", Range::at_least(1))
      .integer("mamba_head_dim", 64, "Mamba head dimension P (headdim)", Range::at_least(1))
      .integer("mamba_num_groups", 8, "groups sharing B and C (ngroups)", Range::at_least(1))
      .optional_integer("mamba_num_heads", "Mamba heads (default 2 x hidden_size / mamba_head_dim)",
                        Range::at_least(1))
      .integer("mamba_chunk_size", 128, "tokens per chunk of the SSD scan", Range::at_least(1))
      .optional_string("hybrid_layer_pattern",
                       "one character per layer: M Mamba, * attention, - MLP, E MoE; | ends a "
                       "pipeline stage (Megatron's --hybrid-override-pattern)")
      .real("hybrid_attention_ratio", 0.0, "share of attention layers when no pattern is given",
            Range::between(0, 1))
      .real("hybrid_mlp_ratio", 0.0, "share of MLP layers when no pattern is given",
            Range::between(0, 1));
  schema.rule([](const config::ConfigTable& t) {
    const std::int64_t h = t.integer("hidden_size"), p = t.integer("mamba_head_dim");
    if (!t.has("mamba_num_heads") && (2 * h) % p != 0) {
      t.fail("mamba_head_dim", "d_inner = 2 x hidden_size = " + std::to_string(2 * h) +
                                   " is not divisible by mamba_head_dim " + std::to_string(p));
    }
    const std::int64_t heads = t.has("mamba_num_heads") ? t.integer("mamba_num_heads") : 2 * h / p;
    if (heads % t.integer("mamba_num_groups") != 0) {
      t.fail("mamba_num_groups", "the Mamba heads (" + std::to_string(heads) +
                                     ") are not divisible by mamba_num_groups " +
                                     std::to_string(t.integer("mamba_num_groups")));
    }
    try {
      nn::allocate_layers(t.integer("num_layers"), t.real("hybrid_attention_ratio"),
                          t.real("hybrid_mlp_ratio"), t.find_string("hybrid_layer_pattern"));
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      const std::string key = what.find("hybrid_layer_pattern") != std::string::npos
                                  ? "hybrid_layer_pattern"
                                  : "hybrid_attention_ratio";
      t.fail(key, what.substr(what.find(": ") + 2));
    }
    // Megatron's hybrid stack: the pattern's E layers are the MoE layers.
    const std::string pattern = t.find_string("hybrid_layer_pattern").value_or("");
    const bool moe_layers = pattern.find('E') != std::string::npos;
    if (moe_layers != (t.integer("num_experts") > 0)) {
      t.fail(moe_layers ? "num_experts" : "hybrid_layer_pattern",
             moe_layers ? "hybrid_layer_pattern has E (MoE) layers, so num_experts is needed"
                        : "num_experts is set but the pattern has no E (MoE) layer");
    }
    if (t.has("moe_layer_pattern") || t.integer("moe_layer_freq") != 1) {
      t.fail(t.has("moe_layer_pattern") ? "moe_layer_pattern" : "moe_layer_freq",
             "a hybrid model's MoE layers are the E layers of hybrid_layer_pattern");
    }
  });
}

MambaConfig parse_mamba_config(const config::ConfigTable& t) {
  MambaConfig c;
  c.model = nn::parse_model_config(t);
  nn::TransformerConfig& tc = c.model.transformer;
  tc.mamba_state_dim = t.integer("mamba_state_dim");
  tc.mamba_head_dim = t.integer("mamba_head_dim");
  tc.mamba_num_groups = t.integer("mamba_num_groups");
  tc.mamba_num_heads = t.find_integer("mamba_num_heads").value_or(0);
  tc.mamba_chunk_size = t.integer("mamba_chunk_size");
  c.layers = nn::allocate_layers(tc.num_layers, t.real("hybrid_attention_ratio"),
                                 t.real("hybrid_mlp_ratio"), t.find_string("hybrid_layer_pattern"));
  tc.moe = nn::parse_moe_config(t, tc.num_layers, tc.ffn_hidden_size);
  for (std::size_t l = 0; l < c.layers.kinds.size(); ++l)
    tc.moe.layer_pattern[l] = c.layers.kinds[l] == 'E' ? 1 : 0;
  return c;
}

}  // namespace megatron::mamba
