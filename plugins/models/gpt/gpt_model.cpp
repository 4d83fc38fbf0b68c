// GPT forward and backward over one micro-batch, in Megatron's (S, B, h) activation layout.
#include "gpt_model.h"

#include <sstream>

#include "megatron/error.h"
#include "megatron/nn/lm_loss.h"
#include "megatron/nn/mixed_gemm.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::gpt {

void GptModel::build(const ModelBuildInfo& info) {
  info_ = info;
  const nn::TransformerConfig& tc = config_.transformer;
  tp_ = tensor_parallelism(info);
  // Megatron pads to a multiple of make_vocab_size_divisible_by x TP, so every rank holds an
  // equal vocabulary slice.
  padded_vocab_ =
      megatron::padded_vocab_size(info.vocab_size, config_.make_vocab_size_divisible_by, tp_.size);
  std::int64_t max_pos = config_.max_position_embeddings;
  if (max_pos == 0) max_pos = info.seq_length;
  if (info.seq_length > max_pos) {
    throw ConfigError("[model] max_position_embeddings " + std::to_string(max_pos) +
                      " is smaller than the data's seq_length " + std::to_string(info.seq_length));
  }

  nn::ParamFactory factory{params_, info.device, info.param_dtype, tp_};
  const bool learned = config_.position_embedding == PositionEmbedding::learned_absolute;
  embedding_.declare(factory, "embedding", padded_vocab_, tc.hidden_size, learned ? max_pos : 0,
                     tc.init_method_std, tc.hidden_dropout);
  layers_.resize(static_cast<std::size_t>(tc.num_layers));
  for (std::int64_t i = 0; i < tc.num_layers; ++i) {
    layers_[static_cast<std::size_t>(i)].declare(factory, "decoder.layers." + std::to_string(i), tc,
                                                 i);
  }
  final_layernorm_ = nn::Norm::declare(factory, "decoder.final_layernorm", tc.hidden_size,
                                       tc.normalization, tc.norm_epsilon);
  if (config_.untie_embeddings_and_output_weights) {
    output_layer_ = &factory.declare("output_layer.weight", {padded_vocab_, tc.hidden_size},
                                     ParamInit::normal, tc.init_method_std, true, nn::Split{0, 1});
  }
  if (tc.rotary_dim > 0 && !info.device.is_meta()) {
    rotary_ = nn::make_rotary_tables(info.seq_length, tc.rotary_dim, config_.rotary_base,
                                     info.param_dtype);
  }
  chunks_ = plan_chunks();
  group_parameters();
  if (!info.device.is_meta())
    nn::initialize_parameters(backend_for(info.device), params_, info.seed);
}

nn::TensorParallelism GptModel::tensor_parallelism(const ModelBuildInfo& info) {
  nn::TensorParallelism tp{info.tensor_comm, info.tp_rank, info.tp_size,
                           info.sequence_parallel && info.tp_size > 1};
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) {
    throw Error("GPT: tensor-parallel rank " + std::to_string(tp.rank) + " of " +
                std::to_string(tp.size));
  }
  if (tp.split() && !tp.comm && !info.device.is_meta()) {
    throw Error("GPT: tensor_model_parallel_size " + std::to_string(tp.size) +
                " needs the tensor-parallel communicator (ModelBuildInfo::tensor_comm)");
  }
  if (tp.comm && (tp.comm->size() != tp.size || tp.comm->rank() != tp.rank)) {
    throw Error("GPT: the tensor-parallel communicator is rank " + std::to_string(tp.comm->rank()) +
                " of " + std::to_string(tp.comm->size()) + ", ModelBuildInfo says " +
                std::to_string(tp.rank) + " of " + std::to_string(tp.size));
  }
  if (tp.sp() && info.seq_length % tp.size != 0) {
    throw ConfigError("sequence_parallel: seq_length (" + std::to_string(info.seq_length) +
                      ") must be divisible by tensor_model_parallel_size (" +
                      std::to_string(tp.size) + "): each rank holds an equal sequence shard");
  }
  return tp;
}

void GptModel::group_parameters() {
  layer_params_.assign(layers_.size(), {});
  head_params_.clear();
  embedding_params_.clear();
  const std::string layer_prefix = "decoder.layers.";
  for (auto& p : params_) {
    if (p->name.starts_with(layer_prefix)) {
      const std::size_t l = std::stoul(p->name.substr(layer_prefix.size()));
      layer_params_.at(l).push_back(p.get());
    } else if (p->name.starts_with("embedding.")) {
      embedding_params_.push_back(p.get());
    } else {
      head_params_.push_back(p.get());
    }
  }
}

std::vector<GptModel::Chunk> GptModel::plan_chunks() const {
  const std::int64_t layers = config_.transformer.num_layers, n = config_.recompute_num_layers;
  std::vector<Chunk> chunks;
  const bool full = config_.recompute_granularity == Recompute::full;
  if (full && config_.recompute_method == RecomputeMethod::uniform) {
    for (std::int64_t b = 0; b < layers; b += n)
      chunks.push_back({b, std::min(layers, b + n), true});
  } else {
    // Block: the first n layers are recomputed one by one; selective recomputes nothing here
    // because the fused attention never stores the S x S probabilities Megatron's selective
    // mode exists to drop.
    for (std::int64_t i = 0; i < layers; ++i)
      chunks.push_back({i, i + 1, full && i < n});
  }
  return chunks;
}

Parameter& GptModel::output_weight() {
  return output_layer_ ? *output_layer_ : *embedding_.word_embeddings;
}

namespace {
// Megatron's layout: (S, B) token ids, row s * B + b.
Tensor to_sequence_major(Backend& be, const Tensor& batch_major) {
  Tensor out = be.empty({batch_major.size(1), batch_major.size(0)}, batch_major.dtype());
  be.copy(batch_major.transpose(0, 1).contiguous(), out);
  return out;
}
}  // namespace

GptModel::Forward GptModel::forward(const nn::LayerContext& ctx, const Tensor& ids, bool keep) {
  Backend& be = ctx.backend;
  const std::int64_t b = ids.size(1), s = local_seq(ids.size(0)), rows = s * b;
  const std::int64_t h = config_.transformer.hidden_size;
  const DType dt = info_.param_dtype;
  const nn::RotaryTables* rotary = rotary_ ? &*rotary_ : nullptr;
  if (rotary && rotary->cos.size(0) != ids.size(0)) {
    throw Error("GPT: rotary tables built for sequence length " +
                std::to_string(rotary->cos.size(0)) + ", batch has " + std::to_string(ids.size(0)));
  }
  if (ids.size(0) != s * (tp_.sp() ? tp_.size : 1)) {
    throw Error("GPT: sequence length " + std::to_string(ids.size(0)) + " does not split into " +
                std::to_string(tp_.size) + " sequence-parallel shards");
  }
  Forward f;
  f.saved.resize(layers_.size());
  f.chunk_inputs.resize(chunks_.size());
  Tensor x = be.empty({s, b, h}, dt);
  embedding_.forward(ctx, ids, 0, x);
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    if (keep) f.chunk_inputs[c] = x;
    const bool keep_layers = keep && !chunks_[c].recompute;
    for (std::int64_t l = chunks_[c].begin; l < chunks_[c].end; ++l) {
      Tensor y = be.empty({s, b, h}, dt);
      layers_[static_cast<std::size_t>(l)].forward(
          ctx, x, rotary, y, f.saved[static_cast<std::size_t>(l)], keep_layers);
      x = y;
    }
  }
  f.x_rows = x.view({rows, h});
  f.normed = be.empty({rows, h}, dt);
  final_layernorm_.forward(be, f.x_rows, f.normed, f.final_saved);
  return f;
}

StepResult GptModel::step(const Batch& batch, const StepOptions& options) {
  Backend& be = backend_for(info_.device);
  const nn::LayerContext ctx{be, options.training, options.dropout_seed, options.dropout_offset,
                             info_.compute_dtype};
  // Every tensor-parallel rank sees the whole micro-batch; under sequence parallelism the
  // activations between the tensor-parallel regions are (S / tp, B, h) sequence shards.
  const std::int64_t b = batch.tokens.size(0), s_full = batch.tokens.size(1);
  const std::int64_t s = local_seq(s_full), rows = s * b, rows_full = s_full * b;
  const std::int64_t h = config_.transformer.hidden_size;
  const DType dt = info_.param_dtype;

  const Tensor ids = to_sequence_major(be, batch.tokens);
  const Tensor labels = to_sequence_major(be, batch.labels).view({rows_full});
  const Tensor mask = batch.loss_mask.transpose(0, 1).contiguous().view({rows_full});
  Forward f = forward(ctx, ids, options.backward);

  Tensor dnormed;
  if (options.backward) dnormed = be.empty({rows, h}, dt);
  const nn::LmLossResult loss =
      nn::lm_loss(be, f.normed, output_weight(), labels, mask, options.loss_scale,
                  options.backward ? &dnormed : nullptr, info_.compute_dtype, tp_);
  StepResult result{loss.loss_sum, loss.token_count};
  if (!options.backward) return result;

  const nn::RotaryTables* rotary = rotary_ ? &*rotary_ : nullptr;
  Tensor dy = be.empty({s, b, h}, dt);
  Tensor dy_rows = dy.view({rows, h});
  final_layernorm_.backward(be, dnormed, f.x_rows, f.final_saved, dy_rows);
  auto ready = [&](const std::vector<Parameter*>& done) {
    if (options.grads_ready && !done.empty()) options.grads_ready(done);
  };
  ready(head_params_);
  for (std::size_t c = chunks_.size(); c-- > 0;) {
    const Chunk& chunk = chunks_[c];
    if (chunk.recompute) {
      Tensor xin = f.chunk_inputs[c];
      for (std::int64_t l = chunk.begin; l < chunk.end; ++l) {
        Tensor y = be.empty({s, b, h}, dt);
        layers_[static_cast<std::size_t>(l)].forward(ctx, xin, rotary, y,
                                                     f.saved[static_cast<std::size_t>(l)], true);
        xin = y;
      }
    }
    f.chunk_inputs[c] = Tensor();
    for (std::int64_t l = chunk.end; l-- > chunk.begin;) {
      Tensor dx = be.empty({s, b, h}, dt);
      layers_[static_cast<std::size_t>(l)].backward(ctx, dy, rotary,
                                                    f.saved[static_cast<std::size_t>(l)], dx);
      dy = dx;
      ready(layer_params_[static_cast<std::size_t>(l)]);
    }
  }
  embedding_.backward(ctx, ids, 0, dy);
  ready(embedding_params_);
  return result;
}

Tensor GptModel::logits(const Batch& batch) {
  Backend& be = backend_for(info_.device);
  if (tp_.split()) {
    throw Error(
        "GPT: logits() gathers the full vocabulary and is for single-rank reference "
        "checks; it is not available at tensor_model_parallel_size " +
        std::to_string(tp_.size));
  }
  const nn::LayerContext ctx{be, false, 0, 0, info_.compute_dtype};
  const std::int64_t b = batch.tokens.size(0), s = batch.tokens.size(1), rows = s * b;
  const DType dt = info_.param_dtype;
  const Forward f = forward(ctx, to_sequence_major(be, batch.tokens), false);
  Tensor logits = be.empty({rows, padded_vocab_}, dt);
  nn::mixed_gemm(be, f.normed, false, output_weight().value, true, logits, info_.compute_dtype);
  Tensor host = Tensor::empty({rows, padded_vocab_}, dt);
  be.copy(logits, host);
  return host.view({s, b, padded_vocab_}).transpose(0, 1).contiguous();
}

double GptModel::flops_per_iteration(std::int64_t samples) const {
  // Megatron's num_floating_point_operations (training.py): forward + backward = 3 x forward,
  // 2 FLOPs per multiply-add, causal attention counted at half.
  const nn::TransformerConfig& tc = config_.transformer;
  const double gbs = static_cast<double>(samples), s = static_cast<double>(info_.seq_length);
  const double l = static_cast<double>(tc.num_layers), h = static_cast<double>(tc.hidden_size);
  const double np = static_cast<double>(tc.num_attention_heads);
  const double ng = static_cast<double>(tc.num_query_groups);
  const double q_ratio = static_cast<double>(tc.kv_channels) * np / h;
  const double glu = tc.swiglu ? 1.5 : 1.0;
  const double ffn = static_cast<double>(tc.ffn_hidden_size);
  return 12.0 * gbs * s * l * h * h * ((1.0 + ng / np + s / h / 2.0) * q_ratio + ffn / h * glu) +
         6.0 * gbs * s * h * static_cast<double>(padded_vocab_);
}

ModelDimensions GptModel::dimensions() const {
  const nn::TransformerConfig& tc = config_.transformer;
  return {tc.num_layers,      tc.hidden_size,   tc.num_attention_heads,
          tc.ffn_hidden_size, info_.seq_length, padded_vocab_};
}

std::string GptModel::describe() const {
  const nn::TransformerConfig& tc = config_.transformer;
  std::ostringstream out;
  out << "GPT: " << tc.num_layers << " layers, hidden " << tc.hidden_size << ", "
      << tc.num_attention_heads << " heads (" << tc.num_query_groups << " query groups, kv "
      << tc.kv_channels << "), ffn " << tc.ffn_hidden_size << (tc.swiglu ? " swiglu" : " gelu")
      << ", vocab " << info_.vocab_size << " padded to " << padded_vocab_ << ", seq "
      << info_.seq_length << ", " << params_.numel() << " parameters";
  if (tp_.split()) {
    out << " on tensor-parallel rank " << tp_.rank << " of " << tp_.size
        << (tp_.sp() ? " (sequence parallel)" : "");
  }
  return out.str();
}

}  // namespace megatron::gpt
