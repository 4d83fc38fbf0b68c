// Writes what tests/reference/gpt_reference.py checks against PyTorch: a GPT's initial weights as
// an iteration-0 checkpoint (the trainer later fine-tunes from it), plus a random batch with our
// logits, loss and every parameter gradient for that batch.
//   gpt_reference_dump OUT_DIR VARIANT   (VARIANT a or b, matching gpt_reference_VARIANT.toml)
#include <iostream>
#include <random>
#include <string>

#include "gpt_model.h"
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
  if (argc != 3) {
    std::cerr << "usage: gpt_reference_dump OUT_DIR VARIANT\n";
    return 2;
  }
  try {
    const std::int64_t vocab = 50257, seq = 32, batch = 2;
    gpt::GptModel model(variant_config(argv[2]));
    ModelBuildInfo info;
    info.vocab_size = vocab;
    info.seq_length = seq;
    info.seed = 1234;
    model.build(info);

    std::mt19937 rng(42);
    std::vector<std::int32_t> tokens(batch * seq), labels(batch * seq);
    std::vector<float> mask(batch * seq);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<std::int32_t>(rng() % vocab);
      labels[i] = static_cast<std::int32_t>(rng() % vocab);
      mask[i] = i % 5 == 3 ? 0.0f : 1.0f;
    }
    Batch b;
    b.set("tokens", Tensor::from(tokens, {batch, seq}));
    b.set("labels", Tensor::from(labels, {batch, seq}));
    b.set("loss_mask", Tensor::from(mask, {batch, seq}));

    checkpoint::CheckpointState state;
    for (auto& p : model.parameters())
      state.tensors["model/" + p->name] = p->value.clone();
    state.tensors["reference/logits"] = model.logits(b);
    StepOptions o;
    o.training = false;
    const StepResult r = model.step(b, o);
    const LossTerm* lm = r.find("lm loss");
    if (!lm) throw Error("GPT returned no \"lm loss\"");
    state.tensors["reference/loss"] = Tensor::from(std::vector<double>{lm->sum / lm->count}, {1});
    for (auto& p : model.parameters())
      state.tensors["reference/grad/" + p->name] = p->grad;
    state.tensors["reference/tokens"] = b["tokens"];
    state.tensors["reference/labels"] = b["labels"];
    state.tensors["reference/loss_mask"] = b["loss_mask"];
    std::cout << checkpoint::save_checkpoint(argv[1], state).string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "gpt_reference_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
