// T5Model: build (both stacks declared in Megatron's order, layout-independent initialisation),
// the encoder -> memory -> decoder -> LM head forward and its backward, in Megatron's (S, B, h)
// activation layout.
#include "t5_model.h"

#include <algorithm>
#include <sstream>

#include "megatron/error.h"
#include "megatron/nn/layer_stack_model.h"
#include "megatron/nn/lm_loss.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::t5 {

namespace {

// Embedding dropout sites of the two embedding calls; the layers' sites follow.
constexpr std::uint64_t encoder_embedding_site = 0, decoder_embedding_site = 1;
constexpr std::uint64_t first_layer_site = 2;

// The dataset's masks are 1 on real tokens (Megatron's enc_mask / dec_mask); the attention ops
// take non-zero = padding.
Tensor padding_keys(Backend& be, const Tensor& mask) {
  Tensor keys = Tensor::empty(mask.shape(), DType::u8);
  const std::int32_t* in = mask.data<std::int32_t>();
  std::uint8_t* out = keys.data<std::uint8_t>();
  for (std::int64_t i = 0; i < mask.numel(); ++i)
    out[i] = in[i] == 0 ? 1 : 0;
  Tensor on_device = be.empty(keys.shape(), DType::u8);
  be.copy(keys, on_device);
  return on_device;
}

std::vector<Parameter*> params_between(ParameterSet& params, std::size_t begin, std::size_t end) {
  std::vector<Parameter*> out;
  for (std::size_t i = begin; i < end; ++i)
    out.push_back(&params[i]);
  return out;
}

}  // namespace

T5Model::T5Model(T5Config config) : config_(std::move(config)) {}

SampleSpec T5Model::input_fields() const {
  return {{"text_enc", DType::i32, {}, FieldKind::token_ids},
          {"text_dec", DType::i32, {}, FieldKind::token_ids},
          {"labels", DType::i32, {}, FieldKind::labels},
          {"loss_mask", DType::f32, {}, FieldKind::mask},
          {"enc_mask", DType::i32, {}, FieldKind::mask},
          {"dec_mask", DType::i32, {}, FieldKind::mask}};
}

nn::ModelConfig T5Model::stack_config(std::int64_t layers) const {
  // Megatron-core builds the encoder from a copy of the config with its own layer count, which
  // also sets the count its output layers' initialisation is scaled by.
  nn::ModelConfig c = config_.model;
  c.transformer.num_layers = layers;
  return c;
}

void T5Model::build(const ModelBuildInfo& info) {
  info_ = info;
  enc_seq_ = info.seq_length;
  const FieldSpec* dec = find_field(info.sample_fields, "text_dec");
  if (!dec || dec->shape.size() != 1) {
    throw ConfigError(
        "T5: the dataset gives no decoder tokens (a text_dec field of one dimension); use [data] "
        "type = \"t5\"");
  }
  dec_seq_ = dec->shape[0];
  if (info.pipeline.size > 1 || info.pipeline.num_chunks() > 1) {
    throw ConfigError(
        "[parallel] pipeline_model_parallel_size: T5 runs on one pipeline stage for now (its "
        "encoder-then-decoder stages are not built yet); use tensor and data parallelism");
  }
  tp_ = nn::model_tensor_parallelism(info, "T5", {enc_seq_, dec_seq_});
  padded_vocab_ = megatron::padded_vocab_size(info.vocab_size,
                                              config_.model.make_vocab_size_divisible_by, tp_.size);
  nn::ModelConfig& mc = config_.model;
  // One position table serves both stacks (Megatron's max_sequence_length); default: the longer.
  if (mc.max_position_embeddings == 0) mc.max_position_embeddings = std::max(enc_seq_, dec_seq_);
  if (mc.position_embedding == nn::PositionEmbedding::learned_absolute &&
      std::max(enc_seq_, dec_seq_) > mc.max_position_embeddings) {
    throw ConfigError("[model] max_position_embeddings " +
                      std::to_string(mc.max_position_embeddings) +
                      " is smaller than the encoder (" + std::to_string(enc_seq_) +
                      ") or decoder (" + std::to_string(dec_seq_) + ") sequence length");
  }
  encoder_rotary_.reset();
  decoder_rotary_.reset();
  if (mc.transformer.rotary_dim > 0 && !info.device.is_meta()) {
    encoder_rotary_ = nn::make_rotary_tables(enc_seq_, mc.transformer.rotary_dim, mc.rotary_base,
                                             info.param_dtype);
    decoder_rotary_ = nn::make_rotary_tables(dec_seq_, mc.transformer.rotary_dim, mc.rotary_base,
                                             info.param_dtype);
  }

  probe_params_ = ParameterSet();
  nn::ParamFactory probe{probe_params_, Device::meta(), info.param_dtype, tp_};
  declare_all(probe);
  params_ = ParameterSet();
  nn::ParamFactory factory{params_, info.device, info.param_dtype, tp_};
  declare_all(factory);
  nn::assign_init_indices(params_, probe_params_, "T5");
  if (!info.device.is_meta())
    nn::initialize_parameters(backend_for(info.device), params_, info.seed);
}

void T5Model::declare_all(nn::ParamFactory& factory) {
  const nn::TransformerConfig& tc = config_.model.transformer;
  const std::int64_t h = tc.hidden_size;
  const bool learned = config_.model.position_embedding == nn::PositionEmbedding::learned_absolute;
  const bool relative = config_.model.position_embedding == nn::PositionEmbedding::relative;
  ParameterSet& ps = factory.params;
  const std::size_t start = ps.size();
  // Megatron-core's T5Model order: embedding, relative position tables, encoder, decoder, head.
  embedding_.declare(factory, "embedding", padded_vocab_, h,
                     learned ? config_.model.max_position_embeddings : 0, tc.init_method_std,
                     tc.hidden_dropout);
  if (relative) {
    encoder_bias_.declare(factory, "encoder_relative_pos_emb", tc.num_attention_heads, true,
                          config_.relative_attention_num_buckets,
                          config_.relative_attention_max_distance, tc.init_method_std);
    decoder_bias_.declare(factory, "decoder_relative_pos_emb", tc.num_attention_heads, false,
                          config_.relative_attention_num_buckets,
                          config_.relative_attention_max_distance, tc.init_method_std);
  }
  const std::size_t after_pre = ps.size();
  const nn::ModelConfig enc_config = stack_config(config_.encoder_num_layers);
  encoder_.declare(
      factory, "encoder.layers", enc_config,
      [](std::int64_t) { return nn::LayerSpec{nn::AttentionMask::padding}; }, {}, first_layer_site);
  const std::size_t enc_norm_begin = ps.size();
  encoder_norm_ =
      nn::Norm::declare(factory, "encoder.final_layernorm", h, tc.normalization, tc.norm_epsilon);
  const std::size_t enc_norm_end = ps.size();
  decoder_.declare(
      factory, "decoder.layers", stack_config(config_.decoder_num_layers),
      [](std::int64_t) {
        return nn::LayerSpec{nn::AttentionMask::causal_padding, true};
      },
      {}, first_layer_site + encoder_.dropout_sites());
  const std::size_t head_begin = ps.size();
  decoder_norm_ =
      nn::Norm::declare(factory, "decoder.final_layernorm", h, tc.normalization, tc.norm_epsilon);
  // Megatron's T5LMHead: a column-parallel output layer whose weight is the word embedding and
  // which has a bias when tied; untied, its own weight and no bias.
  output_layer_weight_ = output_bias_ = nullptr;
  if (config_.model.untie_embeddings_and_output_weights) {
    output_layer_weight_ =
        &factory.declare("lm_head.output_layer.weight", {padded_vocab_, h}, ParamInit::normal,
                         tc.init_method_std, true, nn::Split{0, 1});
  } else {
    output_bias_ = &factory.declare("lm_head.output_layer.bias", {padded_vocab_}, ParamInit::zeros,
                                    0, false, nn::Split{0, 1});
  }
  embedding_params_ = params_between(ps, start, after_pre);
  encoder_norm_params_ = params_between(ps, enc_norm_begin, enc_norm_end);
  head_params_ = params_between(ps, head_begin, ps.size());
}

nn::LayerContext T5Model::context(const StepOptions& options) const {
  return {backend_for(info_.device), options.training, options.dropout_seed, options.dropout_offset,
          info_.compute_dtype};
}

Parameter& T5Model::output_weight() {
  return output_layer_weight_ ? *output_layer_weight_ : *embedding_.word_embeddings;
}

Tensor T5Model::run_stack(const nn::LayerContext& ctx, bool encoder, const Batch& batch,
                          const Tensor& memory, const Tensor& memory_mask, Tensor* memory_grad,
                          const StepOptions& options, StackRun& run) {
  Backend& be = ctx.backend;
  const std::int64_t h = config_.model.transformer.hidden_size;
  const Tensor& tokens = batch[encoder ? "text_enc" : "text_dec"];
  const std::int64_t want = encoder ? enc_seq_ : dec_seq_;
  if (tokens.dim() != 2 || tokens.size(1) != want) {
    throw Error(std::string("T5: ") + (encoder ? "text_enc" : "text_dec") + " is " +
                tokens.describe() + ", the model was built for sequences of " +
                std::to_string(want));
  }
  run.ids = nn::sequence_major(be, tokens);
  const std::int64_t s = run.ids.size(0), b = run.ids.size(1);
  const std::int64_t s_local = tp_.sp() ? s / tp_.size : s;
  Tensor x = be.empty({s_local, b, h}, info_.param_dtype);
  embedding_.forward(ctx, run.ids, encoder ? encoder_embedding_site : decoder_embedding_site, x);

  nn::LayerInputs& in = run.inputs;
  const auto& rotary = encoder ? encoder_rotary_ : decoder_rotary_;
  in.rotary = rotary ? &*rotary : nullptr;
  in.key_padding_mask = padding_keys(be, batch[encoder ? "enc_mask" : "dec_mask"]);
  if (config_.model.position_embedding == nn::PositionEmbedding::relative) {
    in.attention_bias = (encoder ? encoder_bias_ : decoder_bias_).forward(ctx, s, s);
    if (options.backward) {
      run.bias_grad = be.empty(in.attention_bias.shape(), in.attention_bias.dtype());
      be.fill(run.bias_grad, 0.0);
      in.attention_bias_grad = &run.bias_grad;
    }
  }
  if (!encoder) {
    in.memory = memory;
    in.memory_padding_mask = memory_mask;
    in.memory_grad = memory_grad;
  }
  const nn::LayerStack& stack = encoder ? encoder_ : decoder_;
  const Tensor y = stack.forward(ctx, 0, x, in, options.backward, run.state, options);
  const std::int64_t rows = y.size(0) * y.size(1);
  run.x_rows = y.view({rows, h});
  if (options.params_needed) options.params_needed(encoder ? encoder_norm_params_ : head_params_);
  Tensor normed = be.empty({rows, h}, info_.param_dtype);
  (encoder ? encoder_norm_ : decoder_norm_).forward(be, run.x_rows, normed, run.norm_saved);
  return normed.view({y.size(0), b, h});
}

void T5Model::backward_stack(const nn::LayerContext& ctx, bool encoder, const Tensor& dnormed,
                             const StepOptions& options, StackRun& run) {
  Backend& be = ctx.backend;
  const std::int64_t rows = run.x_rows.size(0), h = run.x_rows.size(1);
  const std::int64_t b = run.ids.size(1);
  Tensor dy = be.empty({rows / b, b, h}, info_.param_dtype);
  Tensor dy_rows = dy.view({rows, h});
  (encoder ? encoder_norm_ : decoder_norm_)
      .backward(be, dnormed.view({rows, h}), run.x_rows, run.norm_saved, dy_rows);
  if (options.grads_ready) options.grads_ready(encoder ? encoder_norm_params_ : head_params_);
  const nn::LayerStack& stack = encoder ? encoder_ : decoder_;
  const Tensor dx = stack.backward(ctx, 0, dy, run.inputs, run.state, options);
  if (run.bias_grad.defined())
    (encoder ? encoder_bias_ : decoder_bias_).backward(ctx, run.bias_grad);
  embedding_.backward(ctx, run.ids, encoder ? encoder_embedding_site : decoder_embedding_site, dx);
}

StepResult T5Model::step(const Batch& batch, const StepOptions& options) {
  const nn::LayerContext ctx = context(options);
  Backend& be = ctx.backend;
  if (options.params_needed) options.params_needed(embedding_params_);
  StackRun enc, dec;
  const Tensor memory = run_stack(ctx, true, batch, {}, {}, nullptr, options, enc);
  // Every decoder layer's cross-attention adds its gradient w.r.t. the memory here.
  Tensor dmemory;
  if (options.backward) {
    dmemory = be.empty(memory.shape(), memory.dtype());
    be.fill(dmemory, 0.0);
  }
  const Tensor normed = run_stack(ctx, false, batch, memory, enc.inputs.key_padding_mask,
                                  options.backward ? &dmemory : nullptr, options, dec);

  const Tensor& labels_bm = batch["labels"];
  const std::int64_t rows_full = labels_bm.numel(), h = config_.model.transformer.hidden_size;
  const Tensor labels = nn::sequence_major(be, labels_bm).view({rows_full});
  const Tensor mask = batch["loss_mask"].transpose(0, 1).contiguous().view({rows_full});
  const Tensor normed_rows = normed.view({normed.size(0) * normed.size(1), h});
  Tensor dnormed;
  if (options.backward) dnormed = be.empty(normed_rows.shape(), normed_rows.dtype());
  const nn::LmLossResult loss =
      nn::lm_loss(be, normed_rows, output_weight(), labels, mask, options.loss_scale,
                  options.backward ? &dnormed : nullptr, info_.compute_dtype, tp_, output_bias_);
  if (options.backward) {
    backward_stack(ctx, false, dnormed, options, dec);
    backward_stack(ctx, true, dmemory, options, enc);
    if (options.grads_ready) options.grads_ready(embedding_params_);
  }
  // pretrain_t5 uses pretrain_gpt's loss_func: the loss-masked sum over the masked count.
  return {{{"lm loss", loss.loss_sum, loss.token_count}}};
}

double T5Model::flops_per_iteration(std::int64_t samples) const {
  // Megatron's convention (num_floating_point_operations): 2 FLOPs per multiply-add, backward
  // twice the forward, causal self-attention counted at half. Per sample, forward:
  const nn::TransformerConfig& tc = config_.model.transformer;
  const double h = static_cast<double>(tc.hidden_size), f = static_cast<double>(tc.ffn_hidden_size);
  const double attn = static_cast<double>(tc.num_attention_heads * tc.kv_channels);
  const double qkv = static_cast<double>(tc.qkv_size());
  const double se = static_cast<double>(enc_seq_), sd = static_cast<double>(dec_seq_);
  const double glu = tc.swiglu ? 1.5 : 1.0;
  const double mlp = 2.0 * h * f * glu * 2.0;
  const double encoder_layer =
      se * (2.0 * h * qkv + 2.0 * attn * h + mlp) + 2.0 * 2.0 * se * se * attn;
  const double decoder_layer = sd * (2.0 * h * qkv + 2.0 * attn * h + mlp) +
                               2.0 * 2.0 * sd * sd * attn / 2.0 +        // causal self-attention
                               sd * (2.0 * h * attn + 2.0 * attn * h) +  // cross q and proj
                               se * 2.0 * h * 2.0 * attn +               // cross k, v of memory
                               2.0 * 2.0 * sd * se * attn;
  const double head = sd * 2.0 * h * static_cast<double>(padded_vocab_);
  const double forward = static_cast<double>(config_.encoder_num_layers) * encoder_layer +
                         static_cast<double>(config_.decoder_num_layers) * decoder_layer + head;
  return 3.0 * forward * static_cast<double>(samples);
}

ModelDimensions T5Model::dimensions() const {
  // For memory planning: both stacks' layers at the encoder's (longer) sequence, an upper bound.
  const nn::TransformerConfig& tc = config_.model.transformer;
  return {config_.encoder_num_layers + config_.decoder_num_layers,
          tc.hidden_size,
          tc.num_attention_heads,
          tc.ffn_hidden_size,
          std::max(enc_seq_, dec_seq_),
          padded_vocab_};
}

std::string T5Model::describe() const {
  const nn::TransformerConfig& tc = config_.model.transformer;
  const char* positions[] = {"learned positions", "rope", "no positions", "relative positions"};
  std::ostringstream out;
  out << "T5: " << config_.encoder_num_layers << "+" << config_.decoder_num_layers
      << " layers, hidden " << tc.hidden_size << ", " << tc.num_attention_heads << " heads, kv "
      << tc.kv_channels << ", ffn " << tc.ffn_hidden_size << ", vocab " << info_.vocab_size
      << " padded to " << padded_vocab_ << ", encoder seq " << enc_seq_ << ", decoder seq "
      << dec_seq_ << ", " << positions[static_cast<int>(config_.model.position_embedding)]
      << (config_.model.untie_embeddings_and_output_weights ? ", untied head" : "");
  return nn::describe_model_layout(out.str(), params_.numel(), tp_, info_.pipeline);
}

}  // namespace megatron::t5
