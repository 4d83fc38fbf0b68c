// Writes what tests/reference/mamba_reference.py checks against an independent PyTorch Mamba-2
// (the plain recurrence): a pure (variant a) or hybrid (variant b) model's initial weights, a
// random batch, our loss and every parameter gradient, in one checkpoint-format file.
//   mamba_reference_dump OUT_DIR VARIANT
#include <iostream>
#include <random>
#include <string>

#include "lm_reference_dump.h"
#include "mamba_model.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "perturb_parameters.h"

using namespace megatron;

namespace {

mamba::MambaConfig variant_config(const std::string& variant) {
  if (variant != "a" && variant != "b") throw Error("unknown variant '" + variant + "' (a or b)");
  const std::string pattern = variant == "a" ? "MM" : "M*-M";
  mamba::MambaConfig c;
  nn::TransformerConfig& t = c.model.transformer;
  t.num_layers = static_cast<std::int64_t>(pattern.size());
  t.hidden_size = 64;
  t.num_attention_heads = 4;
  t.num_query_groups = 2;
  t.kv_channels = 16;
  t.ffn_hidden_size = 128;
  t.normalization = nn::NormKind::rmsnorm;
  t.norm_epsilon = 1e-5f;
  t.add_bias_linear = false;
  t.gelu = GeluApproximation::none;  // Megatron's F.gelu without bias fusion
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  t.mamba_state_dim = 16;
  t.mamba_head_dim = 16;
  t.mamba_num_groups = 2;
  t.mamba_chunk_size = 16;  // 40 tokens: two whole chunks and a partial one
  c.model.position_embedding = nn::PositionEmbedding::none;
  c.model.untie_embeddings_and_output_weights = true;
  c.layers = nn::allocate_layers(t.num_layers, 0, 0, pattern);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return reference::dump_main(argc, argv, "mamba_reference_dump", [](const std::string& variant) {
    const std::int64_t vocab = 1000, seq = 40, batch = 2;
    mamba::MambaModel model(variant_config(variant));
    reference::build_for_reference(model, vocab, seq);
    std::mt19937 rng(42);
    // Norm weights, D, A_log, dt_bias and the convolution move off their initial values, so
    // none of them can be misused unnoticed.
    reference::perturb_constant_parameters(model.parameters(), rng);
    const Batch b = reference::random_lm_batch(vocab, batch, seq, 7, rng);
    return reference::lm_reference_state(model, b);
  });
}
