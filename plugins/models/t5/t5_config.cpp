// T5's [model] keys: the shared transformer keys, Megatron's encoder/decoder layer counts and its
// relative position bias settings.
#include "t5_model.h"

namespace megatron::t5 {

void declare_t5_config(config::TableSchema& schema) {
  using config::Range;
  nn::declare_model_config(schema);
  schema.set_choices("position_embedding_type", {"learned_absolute", "rope", "relative"},
                     "position encoding: learned_absolute (one table shared by encoder and "
                     "decoder), rope, or relative (T5's bucketed bias, one table per stack)");
  schema
      .optional_integer("encoder_num_layers", "encoder layers (default num_layers)",
                        Range::at_least(1))
      .optional_integer("decoder_num_layers", "decoder layers (default num_layers)",
                        Range::at_least(1))
      .integer("relative_attention_num_buckets", 32, "buckets of the relative position bias",
               Range::at_least(2))
      .integer("relative_attention_max_distance", 128,
               "distance from which relative positions share the last bucket", Range::at_least(2));
  schema.rule([](const config::ConfigTable& t) {
    if (t.string("position_embedding_type") == "relative" &&
        t.integer("relative_attention_num_buckets") % 2 != 0) {
      t.fail("relative_attention_num_buckets",
             "must be even: the encoder's bidirectional bias gives half the buckets to each "
             "direction");
    }
  });
}

T5Config parse_t5_config(const config::ConfigTable& table) {
  T5Config c;
  c.model = nn::parse_model_config(table);
  const std::int64_t layers = table.integer("num_layers");
  c.encoder_num_layers = table.find_integer("encoder_num_layers").value_or(layers);
  c.decoder_num_layers = table.find_integer("decoder_num_layers").value_or(layers);
  c.model.transformer.num_layers = c.decoder_num_layers;
  c.relative_attention_num_buckets = table.integer("relative_attention_num_buckets");
  c.relative_attention_max_distance = table.integer("relative_attention_max_distance");
  return c;
}

}  // namespace megatron::t5
