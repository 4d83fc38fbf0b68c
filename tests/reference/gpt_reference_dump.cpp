// Writes what tests/reference/gpt_reference.py checks against PyTorch: a GPT's initial weights as
// an iteration-0 checkpoint (the trainer later fine-tunes from it), plus a random batch with our
// logits, loss and every parameter gradient for that batch.
//   gpt_reference_dump OUT_DIR VARIANT   (VARIANT a or b, matching gpt_reference_VARIANT.toml)
#include <iostream>
#include <random>
#include <string>

#include "gpt_model.h"
#include "lm_reference_dump.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"

using namespace megatron;

namespace {

gpt::GptConfig variant_config(const std::string& variant) {
  gpt::GptConfig c;
  nn::TransformerConfig& t = c.transformer;
  t.num_layers = 2;
  t.hidden_size = 64;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 16;
  t.ffn_hidden_size = 256;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  c.max_position_embeddings = 32;
  if (variant == "b") {
    t.num_query_groups = 2;
    t.normalization = nn::NormKind::rmsnorm;
    t.norm_epsilon = 1e-6f;
    t.swiglu = true;
    t.ffn_hidden_size = 160;
    t.add_bias_linear = false;
    t.rotary_dim = 8;  // rotary_percent 0.5 of kv_channels 16
    c.position_embedding = gpt::PositionEmbedding::rope;
    c.rotary_base = 10000;
    c.untie_embeddings_and_output_weights = true;
    c.max_position_embeddings = 0;
  } else if (variant != "a") {
    throw Error("unknown variant '" + variant + "' (a or b)");
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return reference::dump_main(argc, argv, "gpt_reference_dump", [](const std::string& variant) {
    const std::int64_t vocab = 50257, seq = 32, batch = 2;
    gpt::GptModel model(variant_config(variant));
    reference::build_for_reference(model, vocab, seq);
    std::mt19937 rng(42);
    const Batch b = reference::random_lm_batch(vocab, batch, seq, 5, rng);
    checkpoint::CheckpointState state = reference::lm_reference_state(model, b);
    state.tensors["reference/logits"] = model.logits(b);
    return state;
  });
}
