// The BERT embedder: the checkpoint's own config makes the model (through the host's plugins),
// padded batches of [CLS] chunk [SEP] go through it, and the hidden states between the markers
// are averaged.
#include "bert_embedder.h"

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "megatron/train/pretrained.h"

namespace megatron::retro_data {

namespace {

TokenId special(const Tokenizer& t, SpecialToken role, const char* name) {
  const std::optional<TokenId> id = t.special_token(role);
  if (!id) {
    throw ConfigError(std::string("[data] retro_bert_tokenizer_type: ") +
                      std::string(t.type_name()) + " has no " + name + " token");
  }
  return *id;
}

bool has_field(const SampleSpec& fields, const char* name) {
  return find_field(fields, name) != nullptr;
}

}  // namespace

BertEmbedder::BertEmbedder(const std::filesystem::path& checkpoint, const Tokenizer& bert,
                           std::int64_t max_length, const CommandServices& services,
                           ParallelState& parallel, Logger& log)
    : bert_(bert),
      max_length_(max_length),
      cls_(special(bert, SpecialToken::cls, "[CLS]")),
      sep_(special(bert, SpecialToken::sep, "[SEP]")),
      pad_(special(bert, SpecialToken::pad, "[PAD]")) {
  const std::filesystem::path file = checkpoint::resolve_checkpoint(checkpoint);
  const checkpoint::CheckpointState header = checkpoint::load_checkpoint(file, {""});
  if (header.config_toml.empty()) {
    throw ConfigError("[data] retro_bert_load: " + file.string() +
                      " has no stored config to build its model from");
  }
  owner_ = services.create_model(header.config_toml, file.string() + " (its stored config)");
  model_ = dynamic_cast<nn::LayerStackModel*>(owner_.get());
  const SampleSpec inputs = owner_->input_fields();
  if (!model_ || !has_field(inputs, "text") || !has_field(inputs, "padding_mask")) {
    throw ConfigError("[data] retro_bert_load: " + file.string() +
                      " holds a model that is not a BERT (its inputs are " +
                      describe_fields(inputs) + ")");
  }
  ModelBuildInfo info;
  info.vocab_size = static_cast<std::int64_t>(bert.vocab_size());
  info.seq_length = max_length;
  owner_->build(info);
  train::PretrainedRules rules;
  rules.model_type = "bert";
  const train::PretrainedReport report =
      train::load_pretrained(file, *owner_, parallel, rules, log);
  hidden_ = model_->config().transformer.hidden_size;
  identity_ = file.string() + " (iteration " + std::to_string(report.iteration) + ")";
}

std::vector<TokenId> BertEmbedder::sample_ids(const std::string& text) const {
  std::string clean = text;
  for (std::size_t at; (at = clean.find("<|endoftext|>")) != std::string::npos;)
    clean.erase(at, 13);
  std::vector<TokenId> ids{cls_};
  bert_.encode(clean, ids);
  if (ids.size() > static_cast<std::size_t>(max_length_ - 1)) ids.resize(max_length_ - 1);
  if (ids.size() == 1) ids.push_back(pad_);  // Megatron's "hack when empty seq"
  ids.push_back(sep_);
  return ids;
}

Tensor BertEmbedder::embed(const std::vector<std::string>& texts) const {
  const auto batch = static_cast<std::int64_t>(texts.size()), seq = max_length_;
  std::vector<std::int32_t> text(static_cast<std::size_t>(batch * seq), pad_);
  std::vector<std::int32_t> mask(text.size(), 0), types(text.size(), 0);
  std::vector<std::int64_t> lengths;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::vector<TokenId> ids = sample_ids(texts[static_cast<std::size_t>(b)]);
    for (std::size_t s = 0; s < ids.size(); ++s) {
      text[static_cast<std::size_t>(b * seq) + s] = ids[s];
      mask[static_cast<std::size_t>(b * seq) + s] = 1;
    }
    lengths.push_back(static_cast<std::int64_t>(ids.size()));
  }
  Batch in;
  in.set("text", Tensor::from(text, {batch, seq}));
  in.set("types", Tensor::from(types, {batch, seq}));
  in.set("padding_mask", Tensor::from(mask, {batch, seq}));
  const Tensor normed = model_->final_hidden(in);  // (S * B, h), row s * B + b
  Tensor rows = Tensor::empty(normed.shape(), DType::f32);
  backend_for(normed.device()).copy(normed, rows);
  Tensor out = Tensor::empty({batch, hidden_}, DType::f32);
  const float* h = rows.data<float>();
  for (std::int64_t b = 0; b < batch; ++b) {
    std::vector<double> sum(static_cast<std::size_t>(hidden_), 0.0);
    const std::int64_t last = lengths[static_cast<std::size_t>(b)] - 1;  // the [SEP]
    for (std::int64_t s = 1; s < last; ++s) {
      const float* row = h + (s * batch + b) * hidden_;
      for (std::int64_t e = 0; e < hidden_; ++e)
        sum[static_cast<std::size_t>(e)] += row[e];
    }
    float* o = out.data<float>() + b * hidden_;
    for (std::int64_t e = 0; e < hidden_; ++e)
      o[e] = static_cast<float>(sum[static_cast<std::size_t>(e)] / static_cast<double>(last - 1));
  }
  return out;
}

}  // namespace megatron::retro_data
