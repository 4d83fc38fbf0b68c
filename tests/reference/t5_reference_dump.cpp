// Writes what tests/reference/t5_reference.py checks against PyTorch: a T5's weights (biases and
// norms perturbed off their initial constants) and a random batch (encoder and decoder samples
// padded differently) with our lm loss and every parameter gradient.
//   t5_reference_dump OUT_DIR VARIANT   (a: learned absolute positions, b: relative position bias)
#include <iostream>
#include <random>
#include <string>

#include "lm_reference_dump.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "megatron/nn/init.h"
#include "perturb_parameters.h"
#include "t5_model.h"

using namespace megatron;

namespace {

t5::T5Config variant_config(const std::string& variant) {
  if (variant != "a" && variant != "b") throw Error("unknown variant '" + variant + "' (a, b)");
  t5::T5Config c;
  nn::TransformerConfig& t = c.model.transformer;
  c.encoder_num_layers = c.decoder_num_layers = t.num_layers = 2;
  t.hidden_size = 64;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 16;
  t.ffn_hidden_size = 256;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  c.model.max_position_embeddings = 32;
  if (variant == "b") c.model.position_embedding = nn::PositionEmbedding::relative;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return reference::dump_main(argc, argv, "t5_reference_dump", [](const std::string& variant) {
    // bert-base-uncased (30522) + [BOS], [EOS] + 100 sentinels, as the t5 dataset's tokenizer.
    const std::int64_t vocab = 30624, enc = 32, dec = 16, batch = 3;
    const std::int64_t enc_real[batch] = {32, 25, 17}, dec_real[batch] = {16, 11, 6};
    t5::T5Model model(variant_config(variant));
    reference::build_for_reference(model, vocab, enc,
                                   {{"text_dec", DType::i32, {dec}, FieldKind::token_ids}});
    std::mt19937 rng(42);
    reference::perturb_constant_parameters(model.parameters(), rng);

    auto tokens = [&](std::int64_t s, const std::int64_t* real, std::vector<std::int32_t>& ids,
                      std::vector<std::int32_t>& mask) {
      ids.assign(static_cast<std::size_t>(batch * s), 0);
      mask.assign(ids.size(), 0);
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t i = 0; i < real[b]; ++i) {
          ids[static_cast<std::size_t>(b * s + i)] =
              static_cast<std::int32_t>(1000 + rng() % 29000);
          mask[static_cast<std::size_t>(b * s + i)] = 1;
        }
      }
    };
    std::vector<std::int32_t> text_enc, enc_mask, text_dec, dec_mask, labels(batch * dec, 0);
    tokens(enc, enc_real, text_enc, enc_mask);
    tokens(dec, dec_real, text_dec, dec_mask);
    std::vector<float> loss_mask(batch * dec, 0.0f);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (dec_mask[i] == 0) continue;
      labels[i] = static_cast<std::int32_t>(rng() % vocab);
      loss_mask[i] = 1.0f;
    }
    Batch bt;
    bt.set("text_enc", Tensor::from(text_enc, {batch, enc}));
    bt.set("text_dec", Tensor::from(text_dec, {batch, dec}));
    bt.set("labels", Tensor::from(labels, {batch, dec}));
    bt.set("loss_mask", Tensor::from(loss_mask, {batch, dec}));
    bt.set("enc_mask", Tensor::from(enc_mask, {batch, enc}));
    bt.set("dec_mask", Tensor::from(dec_mask, {batch, dec}));

    checkpoint::CheckpointState state;
    for (auto& p : model.parameters())
      state.tensors["model/" + p->name] = p->value.clone();
    nn::zero_gradients(backend_for(Device::cpu()), model.parameters());
    StepOptions o;
    o.training = false;
    const StepResult r = model.step(bt, o);
    const LossTerm* term = r.find("lm loss");
    if (!term) throw Error("T5 returned no \"lm loss\"");
    state.tensors["reference/lm_loss"] =
        Tensor::from(std::vector<double>{term->sum / term->count}, {1});
    for (auto& p : model.parameters())
      state.tensors["reference/grad/" + p->name] = p->grad;
    for (const char* field :
         {"text_enc", "text_dec", "labels", "loss_mask", "enc_mask", "dec_mask"})
      state.tensors[std::string("reference/") + field] = bt[field];
    return state;
  });
}
