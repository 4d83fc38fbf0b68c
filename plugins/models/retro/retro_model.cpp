// Retro: GPT's language model with Retro layers at Megatron's layer numbers, the neighbour
// embeddings in the pre-process and the retrieval encoder's output buffer among the layer inputs.
#include "retro_model.h"
#include "sequence_shards.h"

#include <algorithm>
#include <sstream>

#include "megatron/error.h"
#include "megatron/nn/core_blocks.h"

namespace megatron::retro {

namespace {

std::string shape_text(std::int64_t l, std::int64_t k, std::int64_t r) {
  return "(" + std::to_string(l) + ", " + std::to_string(k) + ", " + std::to_string(r) + ")";
}

}  // namespace

// GPT's embedding state and the neighbours': ids (r, B l k), positions, the gradient accumulator.
struct RetroModel::NeighborState : ProcessState {
  std::unique_ptr<ProcessState> tokens;
  Tensor ids, positions, grad;
};

RetroModel::RetroModel(RetroConfig config)
    : LanguageModel(config.model, "Retro", "final_layernorm"), retro_(std::move(config)) {
  for (const std::int64_t n : retro_layer_numbers(retro_.model.transformer.num_layers))
    retro_layers_.push_back(n - 1);
}

SampleSpec RetroModel::input_fields() const {
  SampleSpec fields = LanguageModel::input_fields();
  fields.push_back({kNeighborTokens, DType::i32, {}, FieldKind::token_ids});
  fields.push_back({kNeighborPositionIds, DType::i32, {}, FieldKind::value, true});
  return fields;
}

std::int64_t RetroModel::chunks_per_sample() const {
  const std::int64_t m = retro_.chunks.chunk_length;
  return (info().seq_length + m - 1) / m;
}

void RetroModel::prepare(const ModelBuildInfo& info) {
  if (info.pipeline.size > 1 || info.pipeline.num_chunks() > 1) {
    throw ConfigError(
        "[parallel] pipeline_model_parallel_size: Retro runs on one pipeline stage (its first "
        "Retro layer's retrieval encoder fills the encoder output every later Retro layer reads, "
        "and the neighbour embeddings come from the first stage's embedding; Megatron refuses "
        "pipeline parallelism for Retro too); use tensor or data parallelism");
  }
  const ChunkShape& c = retro_.chunks;
  if (info.sequence_parallel && info.tp_size > 1 && c.retrieved_length % info.tp_size != 0) {
    throw ConfigError("[parallel] sequence_parallel: the neighbours' " +
                      std::to_string(c.retrieved_length) +
                      " tokens (retro_num_retrieved_chunks x retro_chunk_length) are embedded in "
                      "sequence shards too, so tensor_model_parallel_size (" +
                      std::to_string(info.tp_size) + ") must divide them");
  }
  if (config_.position_embedding == nn::PositionEmbedding::learned_absolute &&
      c.retrieved_length > config_.max_position_embeddings) {
    throw ConfigError("[model] max_position_embeddings: the neighbours' " +
                      std::to_string(c.retrieved_length) +
                      " tokens (retro_num_retrieved_chunks x retro_chunk_length) take learned "
                      "positions too, but the table has " +
                      std::to_string(config_.max_position_embeddings));
  }
  const FieldSpec* field = find_field(info.sample_fields, kNeighborTokens);
  const std::int64_t l = (info.seq_length + c.chunk_length - 1) / c.chunk_length;
  if (field && !field->shape.empty() &&
      field->shape != Shape{l, c.num_neighbors, c.retrieved_length}) {
    throw ConfigError(
        "[model] retro_chunk_length / retro_num_neighbors / "
        "retro_num_retrieved_chunks: the model expects neighbor_tokens of " +
        shape_text(l, c.num_neighbors, c.retrieved_length) + " per sample (" + std::to_string(l) +
        " chunks of " + std::to_string(c.chunk_length) + " tokens, " +
        std::to_string(c.num_neighbors) + " neighbours of " + std::to_string(c.retrieved_length) +
        " tokens), the dataset gives " + shape_str(field->shape));
  }
}

nn::LayerSpec RetroModel::layer_spec(std::int64_t layer) const {
  const auto at = std::find(retro_layers_.begin(), retro_layers_.end(), layer);
  if (at == retro_layers_.end()) return nn::transformer_layer_spec();
  const nn::BlockSpec cross = at == retro_layers_.begin()
                                  ? retriever_cross_attention_block(retro_.chunks, retro_.encoder)
                                  : chunked_cross_attention_block(retro_.chunks);
  return {{nn::self_attention_block(), cross, nn::mlp_block()}};
}

std::uint64_t RetroModel::declare_pre_process(nn::ParamFactory& factory) {
  return LanguageModel::declare_pre_process(factory) + 1;  // the neighbours' embedding dropout
}

nn::LayerInputs RetroModel::layer_inputs(const nn::LayerContext& ctx, const Batch& batch) {
  nn::LayerInputs inputs = LanguageModel::layer_inputs(ctx, batch);
  const ChunkShape& c = retro_.chunks;
  const std::int64_t columns = batch.size() * chunks_per_sample();
  const Shape shape{c.retrieved_length * c.num_neighbors, columns, config_.transformer.hidden_size};
  Tensor output = ctx.backend.empty(shape, info().param_dtype);
  ctx.backend.fill(output, 0.0);
  Tensor grad = ctx.backend.empty(shape, info().param_dtype);
  ctx.backend.fill(grad, 0.0);
  inputs.set(kEncoderOutput, output);
  inputs.collect_gradient(kEncoderOutput, grad);
  return inputs;
}

void RetroModel::check_neighbors(const Tensor& neighbors, std::int64_t batch) const {
  const ChunkShape& c = retro_.chunks;
  const Shape want{batch, chunks_per_sample(), c.num_neighbors, c.retrieved_length};
  if (neighbors.shape() != want) {
    throw Error("Retro: the batch's neighbor_tokens are " + shape_str(neighbors.shape()) +
                ", the model expects " + shape_str(want) + " (batch, chunks of " +
                std::to_string(c.chunk_length) + " tokens, neighbours, retrieved tokens)");
  }
}

Tensor RetroModel::pre_forward(const nn::LayerContext& ctx, const Batch& batch,
                               nn::LayerInputs& inputs, std::unique_ptr<ProcessState>& state) {
  auto st = std::make_unique<NeighborState>();
  Tensor x = LanguageModel::pre_forward(ctx, batch, inputs, st->tokens);
  Backend& be = ctx.backend;
  const Tensor& neighbors = batch[kNeighborTokens];
  check_neighbors(neighbors, batch.size());
  // (B l k, r) as Megatron views them, sequence-major (r, B l k) as the embedding takes ids.
  const std::int64_t r = retro_.chunks.retrieved_length, columns = neighbors.numel() / r;
  st->ids = nn::sequence_major(be, neighbors.view({columns, r}));
  if (batch.has(kNeighborPositionIds)) {
    const Tensor& positions = batch[kNeighborPositionIds];
    if (positions.shape() != neighbors.shape()) {
      throw Error("Retro: the batch's neighbor_position_ids are " + shape_str(positions.shape()) +
                  ", its neighbor_tokens " + shape_str(neighbors.shape()));
    }
    if (embedding().position_embeddings)
      st->positions = nn::sequence_major(be, positions.view({columns, r}));
  }
  // Under sequence parallelism the embedding gives this rank's rows (its own dropout masks
  // those of the unsplit run); the encoder takes whole neighbours.
  Tensor shard =
      be.empty({local_seq(r), columns, config_.transformer.hidden_size}, info().param_dtype);
  embedding().forward(ctx, st->ids, 1, shard, nullptr,
                      st->positions.defined() ? &st->positions : nullptr);
  const Tensor embedded = gather_sequence(be, tp(), shard);
  st->grad = be.empty(embedded.shape(), embedded.dtype());
  be.fill(st->grad, 0.0);
  inputs.set(kNeighborEmbeddings, embedded);
  inputs.collect_gradient(kNeighborEmbeddings, st->grad);
  state = std::move(st);
  return x;
}

void RetroModel::pre_backward(const nn::LayerContext& ctx, ProcessState* state, const Tensor& dx) {
  auto* st = static_cast<NeighborState*>(state);
  LanguageModel::pre_backward(ctx, st->tokens.get(), dx);
  // The encoder's gradient is whole on every rank; the embedding takes its own rows'.
  Tensor grad = st->grad;
  if (tp().sp()) {
    grad = ctx.backend.empty({local_seq(st->grad.size(0)), st->grad.size(1), st->grad.size(2)},
                             st->grad.dtype());
    copy_own_rows(ctx.backend, tp(), st->grad, grad);
  }
  embedding().backward(ctx, st->ids, 1, grad, nullptr,
                       st->positions.defined() ? &st->positions : nullptr);
}

std::string RetroModel::describe() const {
  const nn::TransformerConfig& tc = config_.transformer;
  const ChunkShape& c = retro_.chunks;
  std::ostringstream out;
  out << "Retro: " << tc.num_layers << " layers, hidden " << tc.hidden_size << ", "
      << tc.num_attention_heads << " heads, ffn " << tc.ffn_hidden_size << ", vocab "
      << info().vocab_size << " padded to " << padded_vocab_ << ", seq " << info().seq_length
      << "; chunked cross-attention in layers";
  for (const std::int64_t l : retro_layers_)
    out << " " << l + 1;
  out << " (chunks of " << c.chunk_length << ", " << c.num_neighbors << " neighbours of "
      << c.retrieved_length << " tokens), a " << retro_.encoder.num_layers
      << "-layer retrieval encoder in layer " << retro_layers_.front() + 1;
  return describe_layout(out.str());
}

}  // namespace megatron::retro
