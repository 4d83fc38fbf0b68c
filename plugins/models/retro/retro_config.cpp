// The `retro` model's [model] keys: the shared transformer keys and Megatron's Retro model
// arguments (retro_chunk_length, retro_num_neighbors, retro_num_retrieved_chunks and the
// retrieval encoder's size and dropouts), with RetroConfig's defaults.
#include "retro_model.h"

namespace megatron::retro {

std::vector<std::int64_t> retro_layer_numbers(std::int64_t num_layers) {
  std::vector<std::int64_t> numbers;
  for (std::int64_t n = num_layers <= 15 ? 6 : 9; n <= num_layers; n += 3)
    numbers.push_back(n);
  return numbers;
}

void declare_retro_config(config::TableSchema& schema) {
  using config::Range;
  nn::declare_model_config(schema);
  schema
      .integer("retro_chunk_length", 64, "tokens per chunk m of chunked cross-attention",
               Range::at_least(1))
      .integer("retro_num_neighbors", 2, "neighbours k retrieved per chunk", Range::at_least(1))
      .integer("retro_num_retrieved_chunks", 2,
               "chunks per neighbour (the neighbour and its continuation): r = this x "
               "retro_chunk_length tokens",
               Range::at_least(1))
      .integer("retro_encoder_num_layers", 2, "layers of the retrieval encoder", Range::at_least(1))
      .real("retro_encoder_hidden_dropout", 0.1, "the retrieval encoder's hidden dropout",
            Range::between(0, 1))
      .real("retro_encoder_attention_dropout", 0.1, "the retrieval encoder's attention dropout",
            Range::between(0, 1));
  schema.rule([](const config::ConfigTable& t) {
    if (retro_layer_numbers(t.integer("num_layers")).empty()) {
      t.fail("num_layers",
             "Retro's first chunked cross-attention layer is layer 6 (Megatron's "
             "get_retro_decoder_block_spec), so it needs at least 6 layers, not " +
                 std::to_string(t.integer("num_layers")));
    }
  });
}

RetroConfig parse_retro_config(const config::ConfigTable& t) {
  RetroConfig c;
  c.model = nn::parse_model_config(t);
  c.chunks.chunk_length = t.integer("retro_chunk_length");
  c.chunks.num_neighbors = t.integer("retro_num_neighbors");
  c.chunks.retrieved_length = t.integer("retro_num_retrieved_chunks") * c.chunks.chunk_length;
  c.encoder.num_layers = t.integer("retro_encoder_num_layers");
  c.encoder.hidden_dropout = static_cast<float>(t.real("retro_encoder_hidden_dropout"));
  c.encoder.attention_dropout = static_cast<float>(t.real("retro_encoder_attention_dropout"));
  return c;
}

}  // namespace megatron::retro
