// Writes what tests/reference/moe_reference.py checks against an independent PyTorch MoE GPT: the
// initial weights of a small MoE GPT, a random batch, and from one training step (dropout off,
// loss scale 1, one micro-batch) our lm loss, our load-balancing and z losses as logged, and every
// parameter gradient (of lm loss plus the auxiliary losses, as Megatron's autoscaler makes them).
//   moe_reference_dump OUT_DIR VARIANT
// Variant a: softmax top-2 over 4 experts, aux_loss and z-loss, shared experts, SwiGLU, dropless,
// every layer MoE. Variant b: sigmoid top-2, seq_aux_loss, GeLU, capacity factor 1.0 with
// probability dropping, the first layer dense.
#include <iostream>
#include <random>
#include <string>

#include "gpt_model.h"
#include "lm_reference_dump.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "perturb_parameters.h"

using namespace megatron;

namespace {

gpt::GptConfig variant_config(const std::string& variant) {
  if (variant != "a" && variant != "b") throw Error("unknown variant '" + variant + "' (a or b)");
  gpt::GptConfig c;
  nn::TransformerConfig& t = c.transformer;
  t.num_layers = 2;
  t.hidden_size = 32;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 8;
  t.ffn_hidden_size = 48;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  t.add_bias_linear = false;
  t.gelu = GeluApproximation::none;  // F.gelu without bias fusion, as Megatron
  c.max_position_embeddings = 16;
  nn::MoeConfig& m = t.moe;
  m.num_experts = 4;
  m.ffn_hidden_size = 24;
  m.routing.num_experts = 4;
  m.routing.topk = 2;
  m.aux_loss_coeff = 1e-2;
  if (variant == "a") {
    t.swiglu = true;
    m.layer_pattern = {1, 1};
    m.z_loss_coeff = 1e-3;
    m.shared_expert_ffn = 20;
  } else {
    m.layer_pattern = {0, 1};
    m.routing.score = nn::moe::ScoreFunction::sigmoid;
    m.load_balancing = nn::LoadBalancing::seq_aux_loss;
    m.capacity_factor = 1.0;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return reference::dump_main(argc, argv, "moe_reference_dump", [](const std::string& variant) {
    const std::int64_t vocab = 200, seq = 16, batch = 3;
    gpt::GptModel model(variant_config(variant));
    reference::build_for_reference(model, vocab, seq);
    std::mt19937 rng(42);
    reference::perturb_constant_parameters(model.parameters(), rng);
    const Batch b = reference::random_lm_batch(vocab, batch, seq, 7, rng);
    // A training step (loss scale 1, one micro-batch; the config has no dropout): the auxiliary
    // losses exist in training only.
    return reference::lm_reference_state(model, b, true);
  });
}
