// The shared transformer [model] keys and their parsing into ModelConfig.
#include "megatron/nn/model_config.h"

namespace megatron::nn {

void declare_model_config(config::TableSchema& s) {
  using config::Range;
  s.integer("num_layers", 2, "transformer layers", Range::at_least(1))
      .integer("hidden_size", 64, "hidden size h", Range::at_least(1))
      .integer("num_attention_heads", 4, "attention heads np", Range::at_least(1))
      .optional_integer("num_query_groups",
                        "key/value groups for grouped-query attention (default: one per head)",
                        Range::at_least(1))
      .optional_integer("kv_channels", "head dimension (default hidden_size / heads)",
                        Range::at_least(1))
      .optional_integer("ffn_hidden_size", "MLP width (default 4h, or int(8h/3/64)*64 with swiglu)",
                        Range::at_least(1))
      .optional_integer("max_position_embeddings",
                        "rows of the position table (default: the data's seq_length)",
                        Range::at_least(1))
      .string("position_embedding_type", "learned_absolute", "position encoding",
              {"learned_absolute", "rope", "none"})
      .real("rotary_percent", 1.0, "share of each head's features rotated by rope",
            {0.0, 1.0, true, false})
      .real("rotary_base", 10000.0, "rope base", Range::positive())
      .string("normalization", "LayerNorm", "norm type", {"LayerNorm", "RMSNorm"})
      .real("layernorm_epsilon", 1e-5, "norm epsilon", Range::positive())
      .boolean("swiglu", false, "SwiGLU MLP instead of GeLU")
      .boolean("disable_bias_linear", false, "no biases in linear layers")
      .boolean("add_qkv_bias", false, "bias on linear_qkv even with disable_bias_linear")
      .real("hidden_dropout", 0.1, "dropout after attention/MLP and on embeddings",
            Range::between(0, 1))
      .real("attention_dropout", 0.1, "dropout on attention probabilities", Range::between(0, 1))
      .real("init_method_std", 0.02, "std of the normal initialisation", Range::positive())
      .boolean("untie_embeddings_and_output_weights", false, "separate output_layer.weight")
      .integer("make_vocab_size_divisible_by", 128, "vocabulary padding multiple (x TP size)",
               Range::at_least(1))
      .string("recompute_granularity", "none", "activation recomputation",
              {"none", "selective", "full"})
      .string("recompute_method", "uniform", "layers recomputed with full granularity",
              {"uniform", "block"})
      .integer("recompute_num_layers", 1, "layers per recompute chunk (uniform) or count (block)",
               Range::at_least(1));
  s.rule([](const config::ConfigTable& t) {
    const std::int64_t h = t.integer("hidden_size"), np = t.integer("num_attention_heads");
    if (!t.has("kv_channels") && h % np != 0) {
      t.fail("num_attention_heads", "hidden_size " + std::to_string(h) +
                                        " is not divisible by num_attention_heads " +
                                        std::to_string(np) + " (or set kv_channels)");
    }
    if (t.has("num_query_groups") && np % t.integer("num_query_groups") != 0) {
      t.fail("num_query_groups", "num_attention_heads " + std::to_string(np) +
                                     " is not divisible by num_query_groups " +
                                     std::to_string(t.integer("num_query_groups")));
    }
    if (t.string("recompute_granularity") == "full" &&
        t.integer("recompute_num_layers") > t.integer("num_layers")) {
      t.fail("recompute_num_layers",
             "recompute_num_layers " + std::to_string(t.integer("recompute_num_layers")) +
                 " exceeds num_layers " + std::to_string(t.integer("num_layers")));
    }
    if (t.string("position_embedding_type") == "rope") {
      const std::int64_t hn = t.has("kv_channels") ? t.integer("kv_channels") : h / np;
      const auto rot =
          static_cast<std::int64_t>(static_cast<double>(hn) * t.real("rotary_percent"));
      if (rot < 2 || rot % 2 != 0) {
        t.fail("rotary_percent", "rotary_percent x kv_channels = " + std::to_string(rot) +
                                     " must be an even number of at least 2");
      }
    }
  });
}

ModelConfig parse_model_config(const config::ConfigTable& t) {
  ModelConfig c;
  TransformerConfig& tc = c.transformer;
  tc.num_layers = t.integer("num_layers");
  tc.hidden_size = t.integer("hidden_size");
  tc.num_attention_heads = t.integer("num_attention_heads");
  tc.num_query_groups = t.find_integer("num_query_groups").value_or(tc.num_attention_heads);
  tc.kv_channels = t.find_integer("kv_channels").value_or(tc.hidden_size / tc.num_attention_heads);
  tc.swiglu = t.boolean("swiglu");
  // Megatron's defaults: 4h, or with SwiGLU int(8h/3/64)*64 (keeps the parameter count of 4h).
  const std::int64_t default_ffn =
      tc.swiglu ? (8 * tc.hidden_size / 3) / 64 * 64 : 4 * tc.hidden_size;
  tc.ffn_hidden_size = t.find_integer("ffn_hidden_size").value_or(default_ffn);
  tc.normalization =
      t.string("normalization") == "RMSNorm" ? NormKind::rmsnorm : NormKind::layernorm;
  tc.norm_epsilon = static_cast<float>(t.real("layernorm_epsilon"));
  tc.add_bias_linear = !t.boolean("disable_bias_linear");
  // Megatron fuses bias + GeLU (the tanh approximation) only with biases: --disable-bias-linear
  // turns bias_gelu_fusion off, and the MLP then applies F.gelu, the exact erf form.
  tc.gelu = tc.add_bias_linear ? GeluApproximation::tanh : GeluApproximation::none;
  tc.add_qkv_bias = t.boolean("add_qkv_bias");
  tc.hidden_dropout = static_cast<float>(t.real("hidden_dropout"));
  tc.attention_dropout = static_cast<float>(t.real("attention_dropout"));
  tc.init_method_std = static_cast<float>(t.real("init_method_std"));

  const std::string& pos = t.string("position_embedding_type");
  c.position_embedding = pos == "rope"       ? PositionEmbedding::rope
                         : pos == "none"     ? PositionEmbedding::none
                         : pos == "relative" ? PositionEmbedding::relative
                                             : PositionEmbedding::learned_absolute;
  c.max_position_embeddings = t.find_integer("max_position_embeddings").value_or(0);
  c.rotary_percent = t.real("rotary_percent");
  c.rotary_base = t.real("rotary_base");
  if (c.position_embedding == PositionEmbedding::rope) {
    tc.rotary_dim =
        static_cast<std::int64_t>(static_cast<double>(tc.kv_channels) * c.rotary_percent);
  }
  c.untie_embeddings_and_output_weights = t.boolean("untie_embeddings_and_output_weights");
  c.make_vocab_size_divisible_by = t.integer("make_vocab_size_divisible_by");
  const std::string& rg = t.string("recompute_granularity");
  c.recompute_granularity = rg == "full"        ? Recompute::full
                            : rg == "selective" ? Recompute::selective
                                                : Recompute::none;
  c.recompute_method =
      t.string("recompute_method") == "block" ? RecomputeMethod::block : RecomputeMethod::uniform;
  c.recompute_num_layers = t.integer("recompute_num_layers");
  return c;
}

}  // namespace megatron::nn
