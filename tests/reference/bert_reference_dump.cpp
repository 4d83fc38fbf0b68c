// Writes what tests/reference/bert_reference.py checks against PyTorch: a BERT's initial weights as
// an iteration-0 checkpoint (the trainer later fine-tunes from it), plus a random batch (samples
// padded differently) with our lm and sop losses, every parameter gradient, the final hidden
// states and the LM logits, and each parameter's weight-decay flag.
//   bert_reference_dump OUT_DIR VARIANT   (VARIANT a, matching bert_reference.toml)
#include <cmath>
#include <iostream>
#include <random>
#include <string>

#include "bert_model.h"
#include "lm_reference_dump.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "perturb_parameters.h"

using namespace megatron;

namespace {

bert::BertConfig variant_config(const std::string& variant) {
  if (variant != "a") throw Error("unknown variant '" + variant + "' (a)");
  bert::BertConfig c;
  nn::TransformerConfig& t = c.model.transformer;
  t.num_layers = 2;
  t.hidden_size = 64;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 16;
  t.ffn_hidden_size = 256;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  c.model.max_position_embeddings = 32;
  c.binary_head = true;
  return c;
}

// The LM head on the final hidden states (rows s * B + b, h), written out here from Megatron's
// BertLMHead: dense -> exact gelu -> LayerNorm -> tied word embeddings + output_layer.bias.
// Only for the logits bonus check; the losses and gradients come from the plugin itself.
Tensor lm_logits(nn::LayerStackModel& model, const Tensor& hidden, std::int64_t vocab) {
  ParameterSet& ps = model.parameters();
  auto get = [&](const std::string& name) -> const float* {
    const Parameter* p = ps.find(name);
    if (!p) throw Error("no parameter " + name);
    return p->value.data<float>();
  };
  const std::int64_t rows = hidden.size(0), h = hidden.size(1);
  const float *dw = get("lm_head.dense.weight"), *db = get("lm_head.dense.bias");
  const float *lw = get("lm_head.layer_norm.weight"), *lb = get("lm_head.layer_norm.bias");
  const float *emb = get("embedding.word_embeddings.weight"), *ob = get("output_layer.bias");
  const float* x = hidden.data<float>();
  std::vector<float> logits(static_cast<std::size_t>(rows * vocab));
  std::vector<double> t(static_cast<std::size_t>(h));
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t o = 0; o < h; ++o) {
      double a = db[o];
      for (std::int64_t i = 0; i < h; ++i)
        a += static_cast<double>(dw[o * h + i]) * x[r * h + i];
      t[o] = 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0)));
      mean += t[o];
    }
    mean /= static_cast<double>(h);
    for (std::int64_t o = 0; o < h; ++o)
      var += (t[o] - mean) * (t[o] - mean);
    var /= static_cast<double>(h);
    for (std::int64_t o = 0; o < h; ++o)
      t[o] = (t[o] - mean) / std::sqrt(var + 1e-5) * lw[o] + lb[o];
    for (std::int64_t v = 0; v < vocab; ++v) {
      double a = ob[v];
      for (std::int64_t i = 0; i < h; ++i)
        a += t[i] * emb[v * h + i];
      logits[static_cast<std::size_t>(r * vocab + v)] = static_cast<float>(a);
    }
  }
  return Tensor::from(logits, {rows, vocab});
}

}  // namespace

int main(int argc, char** argv) {
  return reference::dump_main(argc, argv, "bert_reference_dump", [](const std::string& variant) {
    // The bundled bert-base-uncased vocabulary (30522) plus Megatron's appended [BOS] and [EOS].
    const std::int64_t vocab = 30524, seq = 32, batch = 3;
    const std::int64_t real_length[batch] = {32, 27, 19};
    const std::int32_t cls = 101, sep = 102, pad = 0;
    bert::BertModel model(variant_config(variant));
    reference::build_for_reference(model, vocab, seq);

    std::mt19937 rng(42);
    reference::perturb_constant_parameters(model.parameters(), rng);

    // [CLS] A [SEP] B [SEP] then padding, as BERTMaskedWordPieceDataset lays samples out.
    std::vector<std::int32_t> text(batch * seq, pad), types(batch * seq, pad),
        labels(batch * seq, -1), padding(batch * seq, 0), is_random = {1, 0, 1};
    std::vector<float> loss_mask(batch * seq, 0.0f);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t n = real_length[b], split = 2 + static_cast<std::int64_t>(rng() % 8);
      std::int64_t masked = 0;
      for (std::int64_t s = 0; s < n; ++s) {
        const std::size_t i = static_cast<std::size_t>(b * seq + s);
        const bool special = s == 0 || s == split || s == n - 1;
        text[i] = s == 0 ? cls : special ? sep : static_cast<std::int32_t>(1000 + rng() % 29000);
        types[i] = s > split ? 1 : 0;
        padding[i] = 1;
        if (!special && (rng() % 100 < 15 || (masked == 0 && s == n - 2))) {
          labels[i] = static_cast<std::int32_t>(rng() % vocab);
          loss_mask[i] = 1.0f;
          ++masked;
        }
      }
    }
    Batch bt;
    bt.set("text", Tensor::from(text, {batch, seq}));
    bt.set("types", Tensor::from(types, {batch, seq}));
    bt.set("labels", Tensor::from(labels, {batch, seq}));
    bt.set("loss_mask", Tensor::from(loss_mask, {batch, seq}));
    bt.set("padding_mask", Tensor::from(padding, {batch, seq}));
    bt.set("is_random", Tensor::from(is_random, {batch}));

    checkpoint::CheckpointState state;
    for (auto& p : model.parameters()) {
      state.tensors["model/" + p->name] = p->value.clone();
      state.tensors["reference/weight_decay/" + p->name] =
          Tensor::from(std::vector<std::int32_t>{p->weight_decay ? 1 : 0}, {1});
    }
    const Tensor hidden = model.final_hidden(bt);  // rows s * B + b
    state.tensors["reference/final_hidden"] = hidden.clone();
    state.tensors["reference/logits"] = lm_logits(model, hidden, model.padded_vocab_size());

    StepOptions o;
    o.training = false;
    const StepResult r = model.step(bt, o);
    for (const char* name : {"lm loss", "sop loss"}) {
      const LossTerm* term = r.find(name);
      if (!term) throw Error(std::string("BERT returned no \"") + name + "\"");
      state.tensors[std::string("reference/") + (name[0] == 'l' ? "lm_loss" : "sop_loss")] =
          Tensor::from(std::vector<double>{term->sum / term->count}, {1});
    }
    for (auto& p : model.parameters())
      state.tensors["reference/grad/" + p->name] = p->grad;
    for (const char* field : {"text", "types", "labels", "loss_mask", "padding_mask", "is_random"})
      state.tensors[std::string("reference/") + field] = bt[field];
    return state;
  });
}
