// T5Model: build (both stacks declared in Megatron's order, layout-independent initialisation),
// the encoder -> memory -> decoder -> LM head forward and its backward, in Megatron's (S, B, h)
// activation layout.
#include "t5_model.h"

#include <algorithm>
#include <sstream>

#include "megatron/error.h"
#include "megatron/nn/layer_stack_model.h"
#include "megatron/nn/lm_head.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::t5 {

namespace {

// Embedding dropout sites of the two embedding calls; the layers' sites follow.
constexpr std::uint64_t encoder_embedding_site = 0, decoder_embedding_site = 1;
constexpr std::uint64_t first_layer_site = 2;

// A copy, owned by this stage, of the tensor `name` another stage sent (activations or their
// gradients), in the model's dtype on its device.
Tensor received_copy(Backend& be, const NamedTensors& tensors, const char* name, const char* what,
                     DType dtype) {
  const Tensor& t = named_tensor(tensors, name, what);
  Tensor out = be.empty(t.shape(), dtype);
  be.copy(t, out);
  return out;
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

T5Model::StageRole T5Model::stage_role(const ModelBuildInfo& info) const {
  const std::int64_t le = config_.encoder_num_layers, ld = config_.decoder_num_layers;
  const PipelinePlacement& pl = info.pipeline;
  StageRole role;
  if (pl.size == 1 && pl.num_chunks() == 1) {
    role.encoder = {0, le};
    role.decoder = {0, ld};
    role.encoder_embedding = role.encoder_norm = role.decoder_embedding = role.head = true;
    return role;
  }
  if (pl.num_chunks() > 1) {
    throw ConfigError(
        "[parallel] num_layers_per_virtual_pipeline_stage: T5 has no interleaved pipeline "
        "schedule (nor has Megatron's encoder-and-decoder model)");
  }
  // Megatron runs whole encoder stages, then whole decoder stages: the stages' equal share of
  // the layers must split both stacks.
  const std::int64_t total = le + ld, per = total / pl.size;
  if (total % pl.size != 0 || le % per != 0) {
    throw ConfigError("[parallel] pipeline_model_parallel_size " + std::to_string(pl.size) +
                      ": T5 runs whole encoder stages, then whole decoder stages, each holding "
                      "an equal share of the " +
                      std::to_string(le) + " + " + std::to_string(ld) +
                      " layers; choose a size whose share divides both counts");
  }
  const LayerRange mine = pl.chunks.empty() ? LayerRange{0, total} : pl.chunks[0];
  if (mine != LayerRange{pl.rank * per, per}) {
    throw ConfigError("[parallel] T5's pipeline stages hold equal shares of its layers (stage " +
                      std::to_string(pl.rank) + ": layers " + std::to_string(pl.rank * per) + ".." +
                      std::to_string(pl.rank * per + per - 1) +
                      "); decoder_first/last_pipeline_num_layers do not apply");
  }
  if (mine.first < le) {
    role.encoder = mine;
    role.encoder_embedding = mine.first == 0;
    role.encoder_norm = mine.first + mine.count == le;
  } else {
    role.decoder = {mine.first - le, mine.count};
    role.decoder_embedding = mine.first == le;
    role.head = pl.rank == pl.size - 1;
  }
  return role;
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
  role_ = stage_role(info);
  const std::int64_t per =
      (config_.encoder_num_layers + config_.decoder_num_layers) / std::max(info.pipeline.size, 1);
  split_rank_ = info.pipeline.size > 1 ? static_cast<int>(config_.encoder_num_layers / per) : 0;
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

  // The whole model on the meta device first: its declaration order is the initialisation order,
  // so every layout (and every stage's copy of a shared parameter) initialises alike.
  probe_params_ = ParameterSet();
  nn::ParamFactory probe{probe_params_, Device::meta(), info.param_dtype, tp_};
  StageRole whole;
  whole.encoder = {0, config_.encoder_num_layers};
  whole.decoder = {0, config_.decoder_num_layers};
  whole.encoder_embedding = whole.encoder_norm = whole.decoder_embedding = whole.head = true;
  declare_all(probe, whole, 1);
  params_ = ParameterSet();
  nn::ParamFactory factory{params_, info.device, info.param_dtype, tp_};
  declare_all(factory, role_, info.pipeline.size);
  nn::assign_init_indices(params_, probe_params_, "T5");
  if (!info.device.is_meta()) {
    nn::initialize_parameters(backend_for(info.device), params_, info.seed);
  }
}

void T5Model::declare_all(nn::ParamFactory& factory, const StageRole& role, int pp_size) {
  const nn::TransformerConfig& tc = config_.model.transformer;
  const std::int64_t h = tc.hidden_size;
  const bool learned = config_.model.position_embedding == nn::PositionEmbedding::learned_absolute;
  const bool relative = config_.model.position_embedding == nn::PositionEmbedding::relative;
  const bool tied = !config_.model.untie_embeddings_and_output_weights;
  const bool embeds = role.encoder_embedding || role.decoder_embedding;
  ParameterSet& ps = factory.params;
  // Stages holding a copy of a shared parameter (pipeline parallelism only).
  auto share = [&](Parameter* p, std::vector<int> holders) {
    if (!p || pp_size <= 1) return;
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    p->pipeline_holders = std::move(holders);
  };
  auto range = [](int begin, int end) {
    std::vector<int> r;
    for (int i = begin; i < end; ++i)
      r.push_back(i);
    return r;
  };
  embedding_ = nn::Embedding();
  word_copy_ = nullptr;
  encoder_bias_ = decoder_bias_ = nn::RelativePositionBias();
  encoder_ = nn::LayerStack();
  decoder_ = nn::LayerStack();
  encoder_norm_ = decoder_norm_ = nn::Norm();
  output_layer_weight_ = output_bias_ = nullptr;

  // Megatron-core's T5Model order: embedding, relative position tables, encoder, decoder, head.
  const std::size_t start = ps.size();
  if (embeds) {
    embedding_.declare(factory, "embedding", padded_vocab_, h,
                       learned ? config_.model.max_position_embeddings : 0, tc.init_method_std,
                       tc.hidden_dropout);
    std::vector<int> word_holders = {0, split_rank_};
    if (tied) word_holders.push_back(pp_size - 1);
    share(embedding_.word_embeddings, word_holders);
    share(embedding_.position_embeddings, {0, split_rank_});
  }
  if (relative && role.encoder.count > 0) {
    encoder_bias_.declare(factory, "encoder_relative_pos_emb", tc.num_attention_heads, true,
                          config_.relative_attention_num_buckets,
                          config_.relative_attention_max_distance, tc.init_method_std);
    share(encoder_bias_.table, range(0, split_rank_));
  }
  if (relative && role.decoder.count > 0) {
    decoder_bias_.declare(factory, "decoder_relative_pos_emb", tc.num_attention_heads, false,
                          config_.relative_attention_num_buckets,
                          config_.relative_attention_max_distance, tc.init_method_std);
    share(decoder_bias_.table, range(split_rank_, pp_size));
  }
  const std::size_t after_pre = ps.size();
  const nn::LayerSpec encoder_spec = nn::transformer_layer_spec(nn::AttentionMask::padding);
  const nn::LayerSpec decoder_spec = nn::decoder_layer_spec(nn::AttentionMask::causal_padding);
  if (role.encoder.count > 0) {
    encoder_.declare(
        factory, "encoder.layers", stack_config(config_.encoder_num_layers),
        [&](std::int64_t) { return encoder_spec; }, {role.encoder}, first_layer_site);
  }
  const std::size_t enc_norm_begin = ps.size();
  if (role.encoder_norm) {
    encoder_norm_ =
        nn::Norm::declare(factory, "encoder.final_layernorm", h, tc.normalization, tc.norm_epsilon);
  }
  const std::size_t enc_norm_end = ps.size();
  if (role.decoder.count > 0) {
    const std::uint64_t decoder_sites =
        first_layer_site + static_cast<std::uint64_t>(config_.encoder_num_layers) *
                               nn::Layer::dropout_sites(encoder_spec);
    decoder_.declare(
        factory, "decoder.layers", stack_config(config_.decoder_num_layers),
        [&](std::int64_t) { return decoder_spec; }, {role.decoder}, decoder_sites);
  }
  const std::size_t head_begin = ps.size();
  if (role.head) {
    decoder_norm_ =
        nn::Norm::declare(factory, "decoder.final_layernorm", h, tc.normalization, tc.norm_epsilon);
    // Megatron's T5LMHead: a column-parallel output layer whose weight is the word embedding and
    // which has a bias when tied; untied, its own weight and no bias.
    if (!tied) {
      output_layer_weight_ =
          &factory.declare("lm_head.output_layer.weight", {padded_vocab_, h}, ParamInit::normal,
                           tc.init_method_std, true, nn::Split{0, 1});
    } else {
      if (!embeds) {
        // The last stage's own copy of the shared word embedding (same name and initialisation).
        word_copy_ = &factory.declare("embedding.word_embeddings.weight", {padded_vocab_, h},
                                      ParamInit::normal, tc.init_method_std, true, nn::Split{0, 1});
        share(word_copy_, {0, split_rank_, pp_size - 1});
      }
      output_bias_ = &factory.declare("lm_head.output_layer.bias", {padded_vocab_},
                                      ParamInit::zeros, 0, false, nn::Split{0, 1});
    }
  }
  embedding_params_ = params_between(ps, start, after_pre);
  encoder_norm_params_ = params_between(ps, enc_norm_begin, enc_norm_end);
  head_params_ = params_between(ps, head_begin, ps.size());
}

nn::LayerContext T5Model::context(const StepOptions& options) const {
  return nn::layer_context(info_, options);
}

Parameter& T5Model::output_weight() {
  if (output_layer_weight_) return *output_layer_weight_;
  return word_copy_ ? *word_copy_ : *embedding_.word_embeddings;
}

SampleSpec T5Model::stage_inputs(int virtual_stage, std::int64_t micro_batch_size) const {
  const DType dt = info_.param_dtype;
  const std::int64_t h = config_.model.transformer.hidden_size;
  const FieldSpec memory{
      "encoder_output", dt, {local_seq(enc_seq_), micro_batch_size, h}, FieldKind::value};
  if (virtual_stage < split_rank_) {
    return {{"hidden", dt, {local_seq(enc_seq_), micro_batch_size, h}, FieldKind::value}};
  }
  if (virtual_stage == split_rank_) return {memory};
  return {{"hidden", dt, {local_seq(dec_seq_), micro_batch_size, h}, FieldKind::value}, memory};
}

Tensor T5Model::forward_stack(const nn::LayerContext& ctx, bool encoder, const Batch& batch,
                              const Tensor* received, const StepOptions& options, Pending& p) {
  Backend& be = ctx.backend;
  StackRun& run = encoder ? p.encoder : p.decoder;
  const std::int64_t h = config_.model.transformer.hidden_size;
  const char* field = encoder ? "text_enc" : "text_dec";
  const Tensor& tokens = batch[field];
  const std::int64_t s = encoder ? enc_seq_ : dec_seq_, b = tokens.size(0);
  if (tokens.dim() != 2 || tokens.size(1) != s) {
    throw Error(std::string("T5: ") + field + " is " + tokens.describe() +
                ", the model was built for sequences of " + std::to_string(s));
  }
  Tensor x = be.empty({local_seq(s), b, h}, info_.param_dtype);
  if (!received) {
    run.ids = nn::sequence_major(be, tokens);
    embedding_.forward(ctx, run.ids, encoder ? encoder_embedding_site : decoder_embedding_site, x);
  } else {
    if (received->shape() != x.shape()) {
      throw Error(std::string("T5: the ") + (encoder ? "encoder" : "decoder") +
                  " stage received a " + received->describe() + " activation, expected " +
                  shape_str(x.shape()));
    }
    be.copy(*received, x);
  }

  nn::LayerInputs& in = run.inputs;
  const auto& rotary = encoder ? encoder_rotary_ : decoder_rotary_;
  in.set_rotary(rotary ? &*rotary : nullptr);
  in.set(nn::layer_input::key_padding_mask,
         nn::key_padding_from_mask(be, batch[encoder ? "enc_mask" : "dec_mask"]));
  if (config_.model.position_embedding == nn::PositionEmbedding::relative) {
    const Tensor bias = (encoder ? encoder_bias_ : decoder_bias_).forward(ctx, s, s);
    in.set(nn::layer_input::attention_bias, bias);
    if (options.backward) {
      run.bias_grad = be.empty(bias.shape(), bias.dtype());
      be.fill(run.bias_grad, 0.0);
      in.collect_gradient(nn::layer_input::attention_bias, run.bias_grad);
    }
  }
  if (!encoder) {
    in.set(nn::layer_input::memory, p.memory);
    // The encoder's key padding, converted once when this stage ran the encoder too.
    const Tensor encoder_padding = p.encoder.inputs.get(nn::layer_input::key_padding_mask);
    in.set(nn::layer_input::memory_padding_mask,
           encoder_padding.defined() ? encoder_padding
                                     : nn::key_padding_from_mask(be, batch["enc_mask"]));
    // Every decoder layer's cross-attention adds its gradient w.r.t. the memory here.
    if (options.backward) in.collect_gradient(nn::layer_input::memory, p.dmemory);
  }
  const nn::LayerStack& stack = encoder ? encoder_ : decoder_;
  return stack.forward(ctx, 0, x, in, options.backward, run.state, options);
}

Tensor T5Model::final_norm_forward(Backend& be, bool encoder, const Tensor& y, StackRun& run) {
  const std::int64_t h = y.size(2), rows = y.size(0) * y.size(1);
  run.x_rows = y.view({rows, h});
  Tensor normed = be.empty({rows, h}, info_.param_dtype);
  (encoder ? encoder_norm_ : decoder_norm_).forward(be, run.x_rows, normed, run.norm_saved);
  return normed.view(y.shape());
}

Tensor T5Model::final_norm_backward(Backend& be, bool encoder, const Tensor& dnormed,
                                    StackRun& run) {
  const std::int64_t rows = run.x_rows.size(0), h = run.x_rows.size(1);
  Tensor dy = be.empty(dnormed.shape(), info_.param_dtype);
  Tensor dy_rows = dy.view({rows, h});
  (encoder ? encoder_norm_ : decoder_norm_)
      .backward(be, dnormed.view({rows, h}), run.x_rows, run.norm_saved, dy_rows);
  return dy;
}

Tensor T5Model::backward_stack(const nn::LayerContext& ctx, bool encoder, Tensor dy,
                               const StepOptions& options, StackRun& run) {
  const nn::LayerStack& stack = encoder ? encoder_ : decoder_;
  Tensor dx = stack.backward(ctx, 0, dy, run.inputs, run.state, options);
  if (run.bias_grad.defined()) {
    (encoder ? encoder_bias_ : decoder_bias_).backward(ctx, run.bias_grad);
  }
  if (!run.ids.defined()) return dx;
  embedding_.backward(ctx, run.ids, encoder ? encoder_embedding_site : decoder_embedding_site, dx);
  return {};
}

Model::ChunkOutput T5Model::forward_chunk(int chunk, std::int64_t micro_batch, const Batch& batch,
                                          const NamedTensors& input, const StepOptions& options) {
  if (chunk != 0) throw Error("T5: no pipeline chunk " + std::to_string(chunk) + " on this stage");
  const nn::LayerContext ctx = context(options);
  Backend& be = ctx.backend;
  auto owned = std::make_unique<Pending>();
  Pending& p = *owned;
  if (options.backward &&
      !pending_.emplace(std::pair{chunk, micro_batch}, std::move(owned)).second) {
    throw Error("T5: forward of micro-batch " + std::to_string(micro_batch) +
                " run twice before its backward");
  }
  if (options.params_needed && !embedding_params_.empty()) options.params_needed(embedding_params_);
  ChunkOutput out;
  if (role_.encoder.count > 0) {
    const Tensor* received =
        role_.encoder_embedding ? nullptr : &named_tensor(input, "hidden", "T5's stage inputs");
    const Tensor y = forward_stack(ctx, true, batch, received, options, p);
    if (!role_.encoder_norm) {
      out.activations.emplace_back("hidden", y);
      return out;
    }
    if (options.params_needed) options.params_needed(encoder_norm_params_);
    p.memory = final_norm_forward(be, true, y, p.encoder);
    if (role_.decoder.count == 0) {
      out.activations.emplace_back("encoder_output", p.memory);
      return out;
    }
  } else {
    p.memory = received_copy(be, input, "encoder_output", "T5's stage inputs", info_.param_dtype);
  }
  if (options.backward) p.dmemory = be.empty(p.memory.shape(), p.memory.dtype());
  const Tensor* received =
      role_.decoder_embedding ? nullptr : &named_tensor(input, "hidden", "T5's stage inputs");
  const Tensor y = forward_stack(ctx, false, batch, received, options, p);
  if (!role_.head) {
    out.activations.emplace_back("hidden", y);
    out.activations.emplace_back("encoder_output", p.memory);
    return out;
  }
  if (options.params_needed) options.params_needed(head_params_);
  const Tensor normed = final_norm_forward(be, false, y, p.decoder);
  const std::int64_t h = config_.model.transformer.hidden_size;
  const Tensor normed_rows = normed.view({normed.size(0) * normed.size(1), h});
  if (options.backward) p.dnormed = be.empty(normed.shape(), normed.dtype());
  Tensor dnormed_rows = options.backward ? p.dnormed.view(normed_rows.shape()) : Tensor();
  const nn::LmLossResult loss = nn::batch_lm_loss(ctx, batch, normed_rows, output_weight(),
                                                  output_bias_, options, tp_, &dnormed_rows);
  // pretrain_t5 uses pretrain_gpt's loss_func: the loss-masked sum over the masked count.
  out.loss.losses = {{"lm loss", loss.loss_sum, loss.token_count}};
  return out;
}

NamedTensors T5Model::backward_chunk(int chunk, std::int64_t micro_batch,
                                     const NamedTensors& output_grad, const StepOptions& options) {
  auto it = pending_.find({chunk, micro_batch});
  if (it == pending_.end()) {
    throw Error("T5: backward of micro-batch " + std::to_string(micro_batch) +
                " without its forward");
  }
  std::unique_ptr<Pending> owned = std::move(it->second);
  pending_.erase(it);
  Pending& p = *owned;
  const nn::LayerContext ctx = context(options);
  Backend& be = ctx.backend;
  NamedTensors result;
  Tensor dmemory;  // the gradient w.r.t. this stage's encoder output, when it made it
  if (role_.decoder.count > 0) {
    Tensor dy;
    if (role_.head) {
      be.fill(p.dmemory, 0.0);
      dy = final_norm_backward(be, false, p.dnormed, p.decoder);
      if (options.grads_ready) options.grads_ready(head_params_);
    } else {
      // The later decoder stages' gradient w.r.t. the memory; this stage's layers add theirs.
      be.copy(named_tensor(output_grad, "encoder_output", "T5's stage gradients"), p.dmemory);
      dy = received_copy(be, output_grad, "hidden", "T5's stage gradients", info_.param_dtype);
    }
    const Tensor dx = backward_stack(ctx, false, dy, options, p.decoder);
    if (role_.encoder.count == 0) {
      if (dx.defined()) result.emplace_back("hidden", dx);
      result.emplace_back("encoder_output", p.dmemory);
      if (options.grads_ready && !embedding_params_.empty()) options.grads_ready(embedding_params_);
      return result;
    }
    dmemory = p.dmemory;
  }
  Tensor dy;
  if (role_.encoder_norm) {
    if (!dmemory.defined()) {
      dmemory = received_copy(be, output_grad, "encoder_output", "T5's stage gradients",
                              info_.param_dtype);
    }
    dy = final_norm_backward(be, true, dmemory, p.encoder);
    if (options.grads_ready) options.grads_ready(encoder_norm_params_);
  } else {
    dy = received_copy(be, output_grad, "hidden", "T5's stage gradients", info_.param_dtype);
  }
  const Tensor dx = backward_stack(ctx, true, dy, options, p.encoder);
  if (dx.defined()) result.emplace_back("hidden", dx);
  if (options.grads_ready && !embedding_params_.empty()) options.grads_ready(embedding_params_);
  return result;
}

StepResult T5Model::step(const Batch& batch, const StepOptions& options) {
  if (info_.pipeline.size > 1) {
    throw Error(
        "T5: step() runs the whole model; a pipeline stage runs forward_chunk / "
        "backward_chunk");
  }
  const ChunkOutput out = forward_chunk(0, -1, batch, {}, options);
  if (options.backward) backward_chunk(0, -1, {}, options);
  return out.loss;
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
