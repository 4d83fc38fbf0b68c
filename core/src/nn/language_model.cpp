// The decoder-only language model's pre-process (embedding) and post-process (output layer and
// lm loss) on the core's layer stack, in Megatron's (S, B, h) activation layout.
#include "megatron/nn/language_model.h"

#include "megatron/error.h"
#include "megatron/nn/lm_head.h"
#include "megatron/nn/mixed_gemm.h"
#include "megatron/nn/tensor_parallel.h"

namespace megatron::nn {

namespace {

struct EmbeddingState : LayerStackModel::ProcessState {
  Tensor ids;        // (S, B)
  Tensor positions;  // (S, B) from the data's position_ids, or undefined
};
struct HeadState : LayerStackModel::ProcessState {
  Tensor dnormed;  // the loss gradient at the final norm's output, computed with the loss
};

}  // namespace

LanguageModel::LanguageModel(ModelConfig config, std::string name, std::string final_norm)
    : LayerStackModel(std::move(config), name, "decoder", std::move(final_norm)),
      name_(std::move(name)) {}

SampleSpec LanguageModel::input_fields() const {
  return {{"tokens", DType::i32, {}, FieldKind::token_ids},
          {"labels", DType::i32, {}, FieldKind::labels},
          {"loss_mask", DType::f32, {}, FieldKind::mask},
          // reset_position_ids / reset_attention_mask, when the dataset provides them.
          {"position_ids", DType::i32, {}, FieldKind::value, true},
          {"attention_mask", DType::i32, {}, FieldKind::value, true}};
}

LayerInputs LanguageModel::layer_inputs(const LayerContext& ctx, const Batch& batch) {
  LayerInputs inputs;
  inputs.set_rotary(rotary_tables());
  if (batch.has("attention_mask")) {  // (B, S): the first position each token may attend to
    const Tensor& first = batch["attention_mask"];
    Tensor first_key = ctx.backend.empty(first.shape(), DType::i32);
    ctx.backend.copy(first, first_key);
    inputs.set(layer_input::first_key, first_key);
  }
  return inputs;
}

std::uint64_t LanguageModel::declare_pre_process(ParamFactory& factory) {
  const TransformerConfig& tc = config_.transformer;
  const bool learned = config_.position_embedding == PositionEmbedding::learned_absolute;
  embedding_.declare(factory, "embedding", padded_vocab_, tc.hidden_size,
                     learned ? config_.max_position_embeddings : 0, tc.init_method_std,
                     tc.hidden_dropout);
  share_word_embeddings(*embedding_.word_embeddings, config_.untie_embeddings_and_output_weights);
  return 1;  // the embedding dropout
}

void LanguageModel::declare_post_process(ParamFactory& factory, bool with_pre_process) {
  output_layer_ =
      declare_output_weight(factory, with_pre_process, config_.untie_embeddings_and_output_weights);
}

Parameter& LanguageModel::output_weight() {
  return output_layer_ ? *output_layer_ : *embedding_.word_embeddings;
}

Tensor LanguageModel::pre_forward(const LayerContext& ctx, const Batch& batch, LayerInputs&,
                                  std::unique_ptr<ProcessState>& state) {
  const Tensor& tokens = batch["tokens"];
  if (tokens.size(1) != held_seq_length()) {
    throw Error(name_ + ": batch of sequence length " + std::to_string(tokens.size(1)) +
                ", model built for " + std::to_string(held_seq_length()) +
                (info().cp_size > 1 ? " (this context-parallel rank's chunks)" : ""));
  }
  auto st = std::make_unique<EmbeddingState>();
  st->ids = sequence_major(ctx.backend, tokens);
  // Megatron-core's GPTModel gives position_ids to the learned position embedding only.
  if (batch.has("position_ids") && embedding_.position_embeddings) {
    st->positions = sequence_major(ctx.backend, batch["position_ids"]);
  }
  Tensor x = ctx.backend.empty(
      {local_seq(tokens.size(1)), tokens.size(0), config_.transformer.hidden_size},
      info().param_dtype);
  embedding_.forward(ctx, st->ids, 0, x, nullptr,
                     st->positions.defined() ? &st->positions : nullptr);
  state = std::move(st);
  return x;
}

void LanguageModel::pre_backward(const LayerContext& ctx, ProcessState* state, const Tensor& dx) {
  const auto* st = static_cast<EmbeddingState*>(state);
  embedding_.backward(ctx, st->ids, 0, dx, nullptr,
                      st->positions.defined() ? &st->positions : nullptr);
}

StepResult LanguageModel::post_forward(const LayerContext& ctx, const Batch& batch,
                                       const Tensor& normed, const StepOptions& options,
                                       std::unique_ptr<ProcessState>& state) {
  auto st = std::make_unique<HeadState>();
  if (options.backward) st->dnormed = ctx.backend.empty(normed.shape(), info().param_dtype);
  StepResult result;
  const LmLossResult loss = batch_lm_loss(ctx, batch, normed, output_weight(), nullptr, options,
                                          tp(), &st->dnormed, &result.outputs);
  state = std::move(st);
  result.losses = {{"lm loss", loss.loss_sum, loss.token_count}};
  return result;
}

Tensor LanguageModel::post_backward(const LayerContext&, ProcessState* state) {
  return static_cast<HeadState*>(state)->dnormed;
}

Tensor LanguageModel::logits(const Batch& batch) {
  if (tp().split() || info().pipeline.size > 1 || info().cp_size > 1) {
    throw Error(name_ +
                ": logits() gathers the full vocabulary and is for single-rank reference "
                "checks; it is not available with tensor, pipeline or context parallelism");
  }
  Backend& be = backend_for(info().device);
  const std::int64_t b = batch["tokens"].size(0), s = batch["tokens"].size(1), rows = s * b;
  const DType dt = info().param_dtype;
  const Tensor normed = final_hidden(batch);
  Tensor logits = be.empty({rows, padded_vocab_}, dt);
  mixed_gemm(be, normed, false, output_weight().value, true, logits, info().compute_dtype);
  Tensor host = Tensor::empty({rows, padded_vocab_}, dt);
  be.copy(logits, host);
  return host.view({s, b, padded_vocab_}).transpose(0, 1).contiguous();
}

void LanguageModel::check_decodable() const {
  if (info().cp_size > 1) throw Error(name_ + ": decoding runs without context parallelism");
  if (tp().sp()) {
    throw Error(name_ +
                ": decoding runs without sequence parallelism (tensor and pipeline parallelism "
                "are fine)");
  }
}

Tensor LanguageModel::embed_at(const LayerContext& ctx, const Tensor& ids,
                               const std::vector<std::int32_t>& positions) {
  Backend& be = ctx.backend;
  const std::int64_t s = ids.size(0), b = ids.size(1);
  Tensor x = be.empty({s, b, config_.transformer.hidden_size}, info().param_dtype);
  Tensor pos;
  if (embedding_.position_embeddings) {
    pos = be.empty({s, b}, DType::i32);
    be.copy(Tensor::from(positions, {s, b}), pos);
  }
  embedding_.forward(ctx, ids, 0, x, nullptr, pos.defined() ? &pos : nullptr);
  return x;
}

Tensor LanguageModel::host_logits(Backend& be, const Tensor& normed, std::int64_t n) {
  const DType dt = info().param_dtype;
  // Under tensor parallelism each rank holds a block of the vocabulary's rows: its logits
  // transposed (V / tp, n) are gathered block after block into (V, n) on every rank.
  const bool transposed = tp().split();
  const Shape shape = transposed ? Shape{padded_vocab_, n} : Shape{n, padded_vocab_};
  Tensor logits = be.empty(shape, dt);
  if (holds_post_process()) {
    const Tensor& weight = output_weight().value;
    if (transposed) {
      Tensor local = be.empty({weight.size(0), n}, dt);
      mixed_gemm(be, weight, false, normed, true, local, info().compute_dtype);
      tp_gather_rows(tp(), local, logits);
    } else {
      mixed_gemm(be, normed, false, weight, true, logits, info().compute_dtype);
    }
  }
  const PipelinePlacement& pipe = info().pipeline;
  if (pipe.size > 1) {  // from the last stage to every stage, so each returns the same logits
    pipe.comm->broadcast(logits.raw_data(), static_cast<std::size_t>(logits.numel()), dt,
                         pipe.size - 1);
  }
  Tensor host = Tensor::empty(shape, dt);
  be.copy(logits, host);
  return transposed ? host.transpose(0, 1).contiguous() : host;
}

Tensor LanguageModel::decode(DecodeState& state, const Tensor& tokens, bool every_position) {
  check_decodable();
  Backend& be = backend_for(info().device);
  const std::int64_t b = tokens.size(0), s = tokens.size(1);
  StepOptions eval;
  eval.backward = false;
  eval.training = false;
  const LayerContext ctx = context(eval);
  std::vector<std::int32_t> positions(static_cast<std::size_t>(s * b));
  for (std::int64_t i = 0; i < s * b; ++i)  // past ... past + s - 1 in every sequence
    positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(state.past + i / b);
  const auto embed = [&] { return embed_at(ctx, sequence_major(be, tokens), positions); };
  LayerInputs inputs;
  if (const RotaryTables* tables = rotary_tables()) {
    inputs.set(layer_input::rotary_cos, tables->cos.slice(0, state.past, s));
    inputs.set(layer_input::rotary_sin, tables->sin.slice(0, state.past, s));
  }
  const Tensor normed = decode_layers(ctx, s, embed, inputs, state);
  state.past += s;
  if (every_position) {  // rows s * B + b -> (B, S, V)
    return host_logits(be, normed, s * b).view({s, b, padded_vocab_}).transpose(0, 1).contiguous();
  }
  // The last position's rows (held by the last pipeline stage).
  return host_logits(be, normed.defined() ? normed.slice(0, (s - 1) * b, b) : normed, b);
}

Tensor LanguageModel::decode_ragged(std::span<DecodeState* const> states,
                                    std::span<const std::int32_t> tokens) {
  check_decodable();
  if (states.size() != tokens.size() || states.empty()) {
    throw Error(name_ + ": decode_ragged takes one token for each of one or more states");
  }
  Backend& be = backend_for(info().device);
  const auto n = static_cast<std::int64_t>(states.size());
  StepOptions eval;
  eval.backward = false;
  eval.training = false;
  const LayerContext ctx = context(eval);
  std::vector<std::int32_t> positions;
  std::vector<LayerInputs> columns(states.size());
  for (std::size_t i = 0; i < states.size(); ++i) {
    const std::int64_t past = states[i]->past;
    positions.push_back(static_cast<std::int32_t>(past));
    if (const RotaryTables* tables = rotary_tables()) {
      columns[i].set(layer_input::rotary_cos, tables->cos.slice(0, past, 1));
      columns[i].set(layer_input::rotary_sin, tables->sin.slice(0, past, 1));
    }
  }
  const auto embed = [&] {
    Tensor ids = be.empty({1, n}, DType::i32);
    be.copy(Tensor::from(std::vector<std::int32_t>(tokens.begin(), tokens.end()), {1, n}), ids);
    return embed_at(ctx, ids, positions);
  };
  const Tensor normed = decode_layers_ragged(ctx, embed, LayerInputs{}, columns, states);
  for (DecodeState* state : states)
    ++state->past;
  return host_logits(be, normed, n);
}

}  // namespace megatron::nn
