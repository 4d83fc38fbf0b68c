// Writes what tests/reference/retro_reference.py checks against an independent PyTorch
// RetroModel: the initial weights of a small Retro model, a random batch with random neighbour
// tokens, and from one evaluation-mode step our lm loss and every parameter gradient.
//   retro_reference_dump OUT_DIR VARIANT
// Variant a: 9 layers (Retro layers 6 and 9), sequence 10 with chunks of 4 (the first chunk
// partial), 2 neighbours of 2 chunks, a 2-layer encoder, learned positions, tied output layer.
// Variant b: 6 layers (Retro layer 6), sequence 8 with chunks of 4, 3 neighbours of 3 chunks, a
// 3-layer encoder, rotary positions in the decoder's self-attention (none in the encoder, as
// Megatron passes it none), untied output layer.
#include <random>
#include <string>
#include <vector>

#include "lm_reference_dump.h"
#include "megatron/error.h"
#include "perturb_parameters.h"
#include "retro_model.h"

using namespace megatron;

namespace {

retro::RetroConfig variant_config(const std::string& variant) {
  if (variant != "a" && variant != "b") throw Error("unknown variant '" + variant + "' (a or b)");
  const bool a = variant == "a";
  retro::RetroConfig c;
  nn::TransformerConfig& t = c.model.transformer;
  t.num_layers = a ? 9 : 6;
  t.hidden_size = 32;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 8;
  t.ffn_hidden_size = 48;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  t.gelu = GeluApproximation::none;  // F.gelu, as Megatron without bias fusion
  c.model.untie_embeddings_and_output_weights = !a;
  if (!a) {
    c.model.position_embedding = nn::PositionEmbedding::rope;
    t.rotary_dim = t.kv_channels;
  }
  const std::int64_t k = a ? 2 : 3, chunks = a ? 2 : 3;
  c.chunks = {4, k, chunks * 4};
  c.encoder = {a ? 2 : 3, 0.0f, 0.0f};
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return reference::dump_main(argc, argv, "retro_reference_dump", [](const std::string& variant) {
    const retro::RetroConfig config = variant_config(variant);
    const std::int64_t vocab = 200, batch = 2, seq = variant == "a" ? 10 : 8;
    retro::RetroModel model(config);
    reference::build_for_reference(model, vocab, seq);
    std::mt19937 rng(42);
    reference::perturb_constant_parameters(model.parameters(), rng);
    Batch b = reference::random_lm_batch(vocab, batch, seq, 7, rng);
    const retro::ChunkShape& shape = config.chunks;
    const std::int64_t l = (seq + shape.chunk_length - 1) / shape.chunk_length;
    std::vector<std::int32_t> neighbors(
        static_cast<std::size_t>(batch * l * shape.num_neighbors * shape.retrieved_length));
    for (auto& id : neighbors)
      id = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
    b.set(retro::kNeighborTokens,
          Tensor::from(neighbors, {batch, l, shape.num_neighbors, shape.retrieved_length}));
    checkpoint::CheckpointState state = reference::lm_reference_state(model, b);
    state.tensors["reference/neighbor_tokens"] = b[retro::kNeighborTokens];
    return state;
  });
}
