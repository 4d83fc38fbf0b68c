// BERT's configuration, inputs, embedding and the wiring of its heads on the core's layer stack.
#include "bert_model.h"

#include <sstream>

#include "megatron/error.h"

namespace megatron::bert {

void declare_bert_config(config::TableSchema& schema) {
  nn::declare_model_config(schema);
  schema.boolean(
      "bert_binary_head", true,
      "sentence-order head (pooler + binary head, 'sop loss') and token types; Megatron's "
      "--bert-no-binary-head sets it false");
}

BertConfig parse_bert_config(const config::ConfigTable& table) {
  BertConfig c;
  c.model = nn::parse_model_config(table);
  c.binary_head = table.boolean("bert_binary_head");
  return c;
}

namespace {

struct EmbeddingState : nn::LayerStackModel::ProcessState {
  Tensor ids, types;  // (S, B)
  Tensor positions;   // (S, B): the global positions under context parallelism, or undefined
};

}  // namespace

BertModel::BertModel(BertConfig config)
    : LayerStackModel(std::move(config.model), "BERT", "encoder"),
      binary_head_(config.binary_head) {}

TaskHeadParameters BertModel::select_head(const TaskHead& head) {
  // Megatron's task models always pool; a checkpoint without the binary head has no pooler.
  TaskHeadParameters names = nn::TaskHeadLayer::parameters(head, binary_head_);
  head_ = head;
  if (head.kind == TaskHead::Kind::pretraining) return {};
  names.dropped = {"lm_head.", "output_layer.", "binary_head."};
  return names;
}

SampleSpec BertModel::stage_inputs(int virtual_stage, std::int64_t micro_batch_size) const {
  return LayerStackModel::stage_inputs(
      virtual_stage, micro_batch_size * nn::TaskHeadLayer::sequences_per_sample(head_));
}

SampleSpec BertModel::input_fields() const {
  if (head_.kind != TaskHead::Kind::pretraining) {
    // Megatron's process_batch for tasks: text, types, padding_mask and a class label; a
    // multiple-choice sample holds all its choices' sequences, (choices, S) (checked per batch).
    return {{"text", DType::i32, {}, FieldKind::token_ids},
            {"types", DType::i32, {}, FieldKind::value},
            {"padding_mask", DType::i32, {}, FieldKind::mask},
            {"label", DType::i32, {}, FieldKind::value}};
  }
  // Under context parallelism the padding mask stays whole (it masks keys, and every rank's
  // queries see every key round the ring) and the learned position embedding is given the
  // global positions of the rank's chunks.
  SampleSpec fields = {{"text", DType::i32, {}, FieldKind::token_ids},
                       {"types", DType::i32, {}, FieldKind::value},
                       {"labels", DType::i32, {}, FieldKind::labels},
                       {"loss_mask", DType::f32, {}, FieldKind::mask},
                       {"padding_mask", DType::i32, {}, FieldKind::mask, false, true},
                       {"position_ids", DType::i32, {}, FieldKind::value, true}};
  if (binary_head_) fields.push_back({"is_random", DType::i32, {}, FieldKind::value});
  return fields;
}

void BertModel::prepare(const ModelBuildInfo& info) {
  if (config_.untie_embeddings_and_output_weights) {
    throw ConfigError(
        "[model] untie_embeddings_and_output_weights: BERT's LM head is tied to the word "
        "embeddings, as in Megatron-core's BertModel");
  }
  (void)info;
}

std::string BertModel::context_parallel_refusal() const {
  if (head_.kind != TaskHead::Kind::pretraining) {
    return "task heads are not supported with context parallelism yet";
  }
  return "";
}

nn::LayerSpec BertModel::layer_spec(std::int64_t) const {
  return nn::transformer_layer_spec(nn::AttentionMask::padding);
}

std::uint64_t BertModel::declare_pre_process(nn::ParamFactory& factory) {
  const nn::TransformerConfig& tc = config_.transformer;
  const bool learned = config_.position_embedding == nn::PositionEmbedding::learned_absolute;
  embedding_.declare(factory, "embedding", padded_vocab_, tc.hidden_size,
                     learned ? config_.max_position_embeddings : 0, tc.init_method_std,
                     tc.hidden_dropout, binary_head_ ? 2 : 0);
  // A task head has no output layer, so nothing shares the word embeddings.
  share_word_embeddings(*embedding_.word_embeddings, head_.kind != TaskHead::Kind::pretraining);
  return 1;  // the embedding dropout
}

void BertModel::declare_post_process(nn::ParamFactory& factory, bool with_pre_process) {
  const nn::TransformerConfig& tc = config_.transformer;
  const std::int64_t h = tc.hidden_size;
  if (head_.kind != TaskHead::Kind::pretraining) {
    task_head_.declare(factory, tc, head_);
    return;
  }
  lm_head_.declare(factory, "lm_head", tc);
  output_copy_ = declare_output_weight(factory, with_pre_process, false);
  output_bias_ = &factory.declare("output_layer.bias", {padded_vocab_}, ParamInit::zeros, 0, false,
                                  nn::Split{0, 1});
  if (binary_head_) {
    pooler_ = nn::Linear::declare(factory, "pooler.dense", h, h, true, tc.init_method_std);
    binary_head_layer_ =
        nn::Linear::declare(factory, "binary_head", h, 2, true, tc.init_method_std);
  }
}

nn::LayerInputs BertModel::layer_inputs(const nn::LayerContext& ctx, const Batch& batch) {
  nn::LayerInputs inputs;
  inputs.set_rotary(rotary_tables());
  inputs.set(nn::layer_input::key_padding_mask,
             nn::key_padding_from_mask(ctx.backend, sequences(batch, "padding_mask")));
  return inputs;
}

Tensor BertModel::pre_forward(const nn::LayerContext& ctx, const Batch& batch, nn::LayerInputs&,
                              std::unique_ptr<ProcessState>& state) {
  const Tensor text = sequences(batch, "text");
  if (text.size(1) != held_seq_length()) {
    throw Error("BERT: batch of sequence length " + std::to_string(text.size(1)) +
                ", model built for " + std::to_string(held_seq_length()) +
                (info().cp_size > 1 ? " (this context-parallel rank's chunks)" : ""));
  }
  auto st = std::make_unique<EmbeddingState>();
  st->ids = nn::sequence_major(ctx.backend, text);
  if (binary_head_) st->types = nn::sequence_major(ctx.backend, sequences(batch, "types"));
  if (batch.has("position_ids") && embedding_.position_embeddings) {
    st->positions = nn::sequence_major(ctx.backend, batch["position_ids"]);
  }
  Tensor x = ctx.backend.empty(
      {local_seq(text.size(1)), text.size(0), config_.transformer.hidden_size}, info().param_dtype);
  embedding_.forward(ctx, st->ids, 0, x, binary_head_ ? &st->types : nullptr,
                     st->positions.defined() ? &st->positions : nullptr);
  state = std::move(st);
  return x;
}

void BertModel::pre_backward(const nn::LayerContext& ctx, ProcessState* state, const Tensor& dx) {
  auto* st = static_cast<EmbeddingState*>(state);
  embedding_.backward(ctx, st->ids, 0, dx, binary_head_ ? &st->types : nullptr,
                      st->positions.defined() ? &st->positions : nullptr);
}

std::string BertModel::describe() const {
  const nn::TransformerConfig& tc = config_.transformer;
  std::ostringstream out;
  out << "BERT: " << tc.num_layers << " layers, hidden " << tc.hidden_size << ", "
      << tc.num_attention_heads << " heads, ffn " << tc.ffn_hidden_size << ", vocab "
      << info().vocab_size << " padded to " << padded_vocab_ << ", seq " << info().seq_length
      << (head_.kind == TaskHead::Kind::classification
              ? ", classification head (" + std::to_string(head_.num_classes) + " classes)"
          : head_.kind == TaskHead::Kind::multiple_choice
              ? ", multiple-choice head (" + std::to_string(head_.num_classes) + " choices)"
          : binary_head_ ? ", binary head"
                         : ", no binary head");
  return describe_layout(out.str());
}

}  // namespace megatron::bert
