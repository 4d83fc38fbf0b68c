// LayerStackModel: build (declaration by pipeline stage, whole-model initialisation order),
// forward and backward of pipeline chunks, and the one-stage step, in Megatron's (S, B, h)
// activation layout.
#include "megatron/nn/layer_stack_model.h"

#include <cstring>
#include <sstream>
#include <unordered_map>

#include "megatron/error.h"
#include "megatron/nn/moe/moe_block.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::nn {

LayerStackModel::LayerStackModel(ModelConfig config, std::string name, std::string stack_prefix,
                                 std::string final_norm)
    : config_(std::move(config)),
      name_(std::move(name)),
      stack_prefix_(std::move(stack_prefix)),
      final_norm_name_(std::move(final_norm)) {}

LayerSpec LayerStackModel::layer_spec(std::int64_t layer) const {
  LayerSpec spec = transformer_layer_spec(AttentionMask::causal);
  // Megatron's GPT decoder block spec: the MLP of an MoE layer is an MoE block.
  if (config_.transformer.moe.is_moe_layer(layer)) spec.blocks.back() = moe_block();
  return spec;
}

LayerInputs LayerStackModel::layer_inputs(const LayerContext&, const Batch&) {
  LayerInputs inputs;
  inputs.set_rotary(rotary_tables());
  return inputs;
}

namespace {

// The rows of a contiguous host table (rows, width) at `rows`, in that order.
Tensor take_rows(const Tensor& table, const std::vector<std::int64_t>& rows) {
  const Tensor t = table.contiguous();
  Tensor out = Tensor::empty({static_cast<std::int64_t>(rows.size()), t.size(1)}, t.dtype());
  const std::size_t row_bytes = static_cast<std::size_t>(t.size(1)) * dtype_size(t.dtype());
  const auto* from = static_cast<const std::uint8_t*>(t.raw_data());
  auto* to = static_cast<std::uint8_t*>(out.raw_data());
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(to + i * row_bytes, from + static_cast<std::size_t>(rows[i]) * row_bytes,
                row_bytes);
  return out;
}

}  // namespace

Tensor sequence_major(Backend& be, const Tensor& batch_major) {
  Tensor out = be.empty({batch_major.size(1), batch_major.size(0)}, batch_major.dtype());
  be.copy(batch_major.transpose(0, 1).contiguous(), out);
  return out;
}

Tensor key_padding_from_mask(Backend& be, const Tensor& mask) {
  Tensor keys = Tensor::empty(mask.shape(), DType::u8);
  const std::int32_t* in = mask.data<std::int32_t>();
  std::uint8_t* out = keys.data<std::uint8_t>();
  for (std::int64_t i = 0; i < mask.numel(); ++i)
    out[i] = in[i] == 0 ? 1 : 0;
  Tensor on_device = be.empty(keys.shape(), DType::u8);
  be.copy(keys, on_device);
  return on_device;
}

LayerContext layer_context(const ModelBuildInfo& info, const StepOptions& options) {
  LayerContext ctx{backend_for(info.device), options.training,   options.dropout_seed,
                   options.dropout_offset,   info.compute_dtype, options.loss_scale};
  ctx.context = {info.context_comm, info.cp_rank, info.cp_size};
  return ctx;
}

TensorParallelism model_tensor_parallelism(const ModelBuildInfo& info, const std::string& name,
                                           const std::vector<std::int64_t>& seq_lengths) {
  TensorParallelism tp{info.tensor_comm, info.tp_rank, info.tp_size,
                       info.sequence_parallel && info.tp_size > 1};
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) {
    throw Error(name + ": tensor-parallel rank " + std::to_string(tp.rank) + " of " +
                std::to_string(tp.size));
  }
  if (tp.split() && !tp.comm && !info.device.is_meta()) {
    throw Error(name + ": tensor_model_parallel_size " + std::to_string(tp.size) +
                " needs the tensor-parallel communicator (ModelBuildInfo::tensor_comm)");
  }
  if (tp.comm && (tp.comm->size() != tp.size || tp.comm->rank() != tp.rank)) {
    throw Error(name + ": the tensor-parallel communicator is rank " +
                std::to_string(tp.comm->rank()) + " of " + std::to_string(tp.comm->size()) +
                ", ModelBuildInfo says " + std::to_string(tp.rank) + " of " +
                std::to_string(tp.size));
  }
  for (const std::int64_t s : seq_lengths) {
    if (tp.sp() && s % tp.size != 0) {
      throw ConfigError("sequence_parallel: seq_length (" + std::to_string(s) +
                        ") must be divisible by tensor_model_parallel_size (" +
                        std::to_string(tp.size) + "): each rank holds an equal sequence shard");
    }
  }
  return tp;
}

ExpertParallelism model_expert_parallelism(const ModelBuildInfo& info, const std::string& name) {
  ExpertParallelism ep{info.expert_comm, info.ep_rank, info.ep_size, info.etp_size};
  if (ep.size < 1 || ep.rank < 0 || ep.rank >= ep.size) {
    throw Error(name + ": expert-parallel rank " + std::to_string(ep.rank) + " of " +
                std::to_string(ep.size));
  }
  if (ep.split() && !info.device.is_meta() &&
      (!ep.comm || ep.comm->size() != ep.size || ep.comm->rank() != ep.rank)) {
    throw Error(name + ": expert_model_parallel_size " + std::to_string(ep.size) +
                " needs the expert-parallel communicator of that size "
                "(ModelBuildInfo::expert_comm)");
  }
  return ep;
}

void assign_init_indices(ParameterSet& params, const ParameterSet& probe, const std::string& name) {
  std::unordered_map<std::string, std::int64_t> index;
  for (std::size_t i = 0; i < probe.size(); ++i)
    index.emplace(probe[i].name, static_cast<std::int64_t>(i));
  for (auto& p : params) {
    auto it = index.find(p->name);
    if (it == index.end()) {
      throw Error(name + ": parameter " + p->name +
                  " is declared on this pipeline stage but not in the whole model");
    }
    p->init_index = it->second;
  }
}

void LayerStackModel::declare_all(ParamFactory& factory, const std::vector<LayerRange>& chunks,
                                  bool pre, bool post) {
  const std::size_t start = factory.params.size();
  // The pre-process's dropout sites come first whether or not this stage holds it, so every
  // stage numbers its layers' sites alike.
  if (pre) pre_sites_ = declare_pre_process(factory);
  const std::size_t after_pre = factory.params.size();
  stack_.declare(
      factory, stack_prefix_ + ".layers", config_, [this](std::int64_t l) { return layer_spec(l); },
      chunks, pre_sites_);
  const std::size_t after_stack = factory.params.size();
  if (post) {
    const TransformerConfig& tc = config_.transformer;
    final_norm_ = Norm::declare(factory, stack_prefix_ + "." + final_norm_name_, tc.hidden_size,
                                tc.normalization, tc.norm_epsilon);
    declare_post_process(factory, pre);
  }
  pre_params_.clear();
  post_params_.clear();
  for (std::size_t i = start; i < after_pre; ++i)
    pre_params_.push_back(&factory.params[i]);
  for (std::size_t i = after_stack; i < factory.params.size(); ++i)
    post_params_.push_back(&factory.params[i]);
}

std::string LayerStackModel::context_parallel_refusal() const {
  return "context parallelism is not supported for this model yet";
}

// Refuses a context-parallel layout this model or this sequence length cannot take.
void LayerStackModel::check_context_parallelism(const ModelBuildInfo& info) const {
  if (info.cp_size < 1 || info.cp_rank < 0 || info.cp_rank >= info.cp_size) {
    throw Error(name_ + ": context-parallel rank " + std::to_string(info.cp_rank) + " of " +
                std::to_string(info.cp_size));
  }
  if (info.cp_size == 1) return;
  const std::string cp = "[parallel] context_parallel_size = " + std::to_string(info.cp_size);
  if (const std::string why = context_parallel_refusal(); !why.empty()) {
    throw ConfigError(cp + ": " + name_ + ": " + why);
  }
  if (info.seq_length % (2 * info.cp_size) != 0) {
    throw ConfigError(cp + ": seq_length " + std::to_string(info.seq_length) +
                      " must be divisible by 2 x " + std::to_string(info.cp_size) +
                      " (each sequence is cut into 2 x context_parallel_size equal chunks)");
  }
  if (!info.context_comm && !info.device.is_meta()) {
    throw Error(name_ + ": context_parallel_size " + std::to_string(info.cp_size) +
                " needs the context-parallel communicator (ModelBuildInfo::context_comm)");
  }
}

void LayerStackModel::build(const ModelBuildInfo& info) {
  info_ = info;
  check_context_parallelism(info);
  tp_ = model_tensor_parallelism(info, name_, {info.seq_length / info.cp_size});
  if (info.pipeline.size < 1 || info.pipeline.rank < 0 ||
      info.pipeline.rank >= info.pipeline.size) {
    throw Error(name_ + ": pipeline rank " + std::to_string(info.pipeline.rank) + " of " +
                std::to_string(info.pipeline.size));
  }
  // Megatron pads to a multiple of make_vocab_size_divisible_by x TP, so every rank holds an
  // equal vocabulary slice.
  padded_vocab_ =
      megatron::padded_vocab_size(info.vocab_size, config_.make_vocab_size_divisible_by, tp_.size);
  // Positions: max_position_embeddings (default: the sequence length) must cover the data; rotary
  // tables are built for the data's sequence length.
  if (config_.max_position_embeddings == 0) config_.max_position_embeddings = info.seq_length;
  if (info.seq_length > config_.max_position_embeddings) {
    throw ConfigError("[model] max_position_embeddings " +
                      std::to_string(config_.max_position_embeddings) +
                      " is smaller than the data's seq_length " + std::to_string(info.seq_length));
  }
  if (config_.position_embedding == PositionEmbedding::rope &&
      config_.transformer.rotary_dim <= 0) {
    // parse_model_config derives rotary_dim; a config built in code must set it.
    throw ConfigError("[model] position_embedding_type = \"rope\" with rotary_dim " +
                      std::to_string(config_.transformer.rotary_dim) +
                      ": the layers would have no positions at all");
  }
  rotary_.reset();
  if (config_.transformer.rotary_dim > 0 && !info.device.is_meta()) {
    rotary_ = make_rotary_tables(info.seq_length, config_.transformer.rotary_dim,
                                 config_.rotary_base, info.param_dtype);
    if (info.cp_size > 1) {  // Megatron's get_pos_emb_on_this_cp_rank: this rank's rows
      const ContextParallelism cp{info.context_comm, info.cp_rank, info.cp_size};
      rotary_ = RotaryTables{take_rows(rotary_->cos, context_positions(cp, info.seq_length)),
                             take_rows(rotary_->sin, context_positions(cp, info.seq_length))};
    }
  }
  prepare(info);

  const ExpertParallelism ep = model_expert_parallelism(info, name_);
  // The whole model on the meta device first: its declaration order is the initialisation
  // order (parameter k draws Philox stream k), so every layout initialises alike.
  probe_params_ = ParameterSet();
  ParameterSet probe_buffers;
  ParamFactory probe{probe_params_, Device::meta(), info.param_dtype, tp_, ep, &probe_buffers};
  declare_all(probe, {}, true, true);

  params_ = ParameterSet();
  buffers_ = ParameterSet();
  ParamFactory factory{params_, info.device, info.param_dtype, tp_, ep, &buffers_};
  declare_all(factory, info.pipeline.chunks, holds_pre_process(), holds_post_process());
  assign_init_indices(params_, probe_params_, name_);
  if (!info.device.is_meta()) initialize_parameters(backend_for(info.device), params_, info.seed);
}

void LayerStackModel::end_training_iteration() {
  stack_.end_training_iteration(backend_for(info_.device), info_.data_comm);
}

LayerContext LayerStackModel::context(const StepOptions& options) const {
  return layer_context(info_, options);
}

SampleSpec LayerStackModel::stage_inputs(int, std::int64_t micro_batch_size) const {
  return {{"hidden",
           info_.param_dtype,
           {local_seq(held_seq_length()), micro_batch_size, config_.transformer.hidden_size},
           FieldKind::value}};
}

Model::ChunkOutput LayerStackModel::forward_chunk(int chunk, std::int64_t micro_batch,
                                                  const Batch& batch, const NamedTensors& input,
                                                  const StepOptions& options) {
  if (chunk < 0 || chunk >= static_cast<int>(stack_.chunks().size())) {
    throw Error(name_ + ": no pipeline chunk " + std::to_string(chunk) + " on this stage");
  }
  // A training forward collects its layers' auxiliary losses (MoE) for the log.
  AuxLosses aux;
  LayerContext ctx = context(options);
  if (options.backward && options.training) ctx.aux_losses = &aux;
  Backend& be = ctx.backend;
  Pending p;
  p.inputs = layer_inputs(ctx, batch);
  Tensor x;
  if (info_.pipeline.is_first_virtual_stage(chunk)) {
    if (options.params_needed && !pre_params_.empty()) options.params_needed(pre_params_);
    x = pre_forward(ctx, batch, p.inputs, p.pre);
  } else {
    const Tensor& received = named_tensor(input, "hidden", name_ + "'s stage inputs");
    const Shape want = stage_inputs(1, batch.size())[0].shape;
    if (received.shape() != want) {
      throw Error(name_ + ": pipeline chunk " + std::to_string(chunk) + " received a " +
                  received.describe() + " activation, expected " + shape_str(want));
    }
    x = be.empty(want, info_.param_dtype);
    be.copy(received, x);
  }
  x = stack_.forward(ctx, chunk, x, p.inputs, options.backward, p.stack, options);
  ChunkOutput out;
  if (!info_.pipeline.is_last_virtual_stage(chunk)) {
    out.activations.emplace_back("hidden", x);
  } else {
    const std::int64_t h = config_.transformer.hidden_size, rows = x.size(0) * x.size(1);
    p.x_rows = x.view({rows, h});
    if (options.params_needed && !post_params_.empty()) options.params_needed(post_params_);
    Tensor normed = be.empty({rows, h}, info_.param_dtype);
    final_norm_.forward(be, p.x_rows, normed, p.final_saved);
    out.loss = post_forward(ctx, batch, normed, options, p.post);
  }
  // Logged, not optimised: the layers add their gradients themselves.
  for (const auto& [name, term] : aux.terms)
    out.loss.losses.push_back({name, term.first, term.second, false});
  if (options.backward) {
    if (!pending_.emplace(std::pair{chunk, micro_batch}, std::move(p)).second) {
      throw Error(name_ + ": forward of chunk " + std::to_string(chunk) + ", micro-batch " +
                  std::to_string(micro_batch) + " run twice before its backward");
    }
  }
  return out;
}

NamedTensors LayerStackModel::backward_chunk(int chunk, std::int64_t micro_batch,
                                             const NamedTensors& output_grad,
                                             const StepOptions& options) {
  auto it = pending_.find({chunk, micro_batch});
  if (it == pending_.end()) {
    throw Error(name_ + ": backward of chunk " + std::to_string(chunk) + ", micro-batch " +
                std::to_string(micro_batch) + " without its forward");
  }
  Pending p = std::move(it->second);
  pending_.erase(it);
  const LayerContext ctx = context(options);
  Backend& be = ctx.backend;
  Tensor dy;
  if (info_.pipeline.is_last_virtual_stage(chunk)) {
    const std::int64_t rows = p.x_rows.size(0), h = p.x_rows.size(1);
    const Tensor dnormed = post_backward(ctx, p.post.get());
    p.post.reset();
    const std::int64_t s = local_seq(held_seq_length());
    dy = be.empty({s, rows / s, h}, info_.param_dtype);
    Tensor dy_rows = dy.view({rows, h});
    final_norm_.backward(be, dnormed, p.x_rows, p.final_saved, dy_rows);
    if (options.grads_ready && !post_params_.empty()) options.grads_ready(post_params_);
  } else {
    const Tensor& g = named_tensor(output_grad, "hidden", name_ + "'s stage gradients");
    dy = be.empty(g.shape(), info_.param_dtype);
    be.copy(g, dy);
  }
  dy = stack_.backward(ctx, chunk, dy, p.inputs, p.stack, options);
  if (!info_.pipeline.is_first_virtual_stage(chunk)) return {{"hidden", dy}};
  pre_backward(ctx, p.pre.get(), dy);
  if (options.grads_ready && !pre_params_.empty()) options.grads_ready(pre_params_);
  return {};
}

StepResult step_whole_model(Model& model, const std::string& name, bool whole, const Batch& batch,
                            const StepOptions& options) {
  if (!whole) {
    throw Error(name +
                ": step() runs the whole model; a pipeline stage runs forward_chunk / "
                "backward_chunk");
  }
  const Model::ChunkOutput out = model.forward_chunk(0, -1, batch, {}, options);
  if (options.backward) model.backward_chunk(0, -1, {}, options);
  return out.loss;
}

StepResult LayerStackModel::step(const Batch& batch, const StepOptions& options) {
  return step_whole_model(*this, name_, info_.pipeline.size == 1 && stack_.chunks().size() == 1,
                          batch, options);
}

Tensor LayerStackModel::final_hidden(const Batch& batch) {
  if (info_.pipeline.size > 1 || stack_.chunks().size() > 1) {
    throw Error(name_ + ": final_hidden() runs the whole model on one pipeline stage");
  }
  StepOptions eval;
  eval.backward = false;
  eval.training = false;
  eval.dropout_seed = 0;
  const LayerContext ctx = context(eval);
  Backend& be = ctx.backend;
  std::unique_ptr<ProcessState> pre;
  LayerStack::State state;
  LayerInputs inputs = layer_inputs(ctx, batch);
  const Tensor embedded = pre_forward(ctx, batch, inputs, pre);
  const Tensor x = stack_.forward(ctx, 0, embedded, inputs, false, state, eval);
  const std::int64_t h = config_.transformer.hidden_size, rows = x.size(0) * x.size(1);
  Tensor normed = be.empty({rows, h}, info_.param_dtype);
  Norm::Saved saved;
  final_norm_.forward(be, x.view({rows, h}), normed, saved);
  return normed;
}

bool LayerStackModel::can_decode() const {
  return !tp_.sp() && stack_.can_decode();
}

LayerStackModel::DecodeState LayerStackModel::start_decoding(std::int64_t batch,
                                                             std::int64_t max_tokens) const {
  if (!can_decode()) {
    throw Error(name_ +
                ": cannot decode incrementally (a block without a decoding cache, or sequence "
                "parallelism)");
  }
  if (max_tokens < 1 || max_tokens > info_.seq_length) {
    throw Error(name_ + ": decoding up to " + std::to_string(max_tokens) +
                " tokens, the model is built for " + std::to_string(info_.seq_length));
  }
  DecodeState state;
  state.caches =
      stack_.start_caches(backend_for(info_.device), batch, max_tokens, info_.param_dtype);
  state.batch = batch;
  state.max_tokens = max_tokens;
  return state;
}

namespace {
constexpr int kDecodeTag = 16384;  // beyond the training schedule's tags, within MPI's 32767
}  // namespace

Tensor LayerStackModel::decode_stages(const LayerContext& ctx, const Shape& shape,
                                      const std::function<Tensor()>& embed,
                                      const std::function<Tensor(int, const Tensor&)>& run) const {
  const PipelinePlacement& pipe = info_.pipeline;
  Backend& be = ctx.backend;
  Tensor normed;
  for (int chunk = 0; chunk < pipe.num_chunks(); ++chunk) {
    Tensor x;
    if (pipe.is_first_virtual_stage(chunk)) {
      x = embed();
    } else {
      // The previous virtual stage: this chunk on the stage before, or the last stage's chunk
      // before this one.
      x = be.empty(shape, info_.param_dtype);
      pipe.comm->recv(x.raw_data(), static_cast<std::size_t>(x.numel()), x.dtype(),
                      (pipe.rank + pipe.size - 1) % pipe.size, kDecodeTag + chunk);
    }
    const Tensor y = run(chunk, x);
    if (!pipe.is_last_virtual_stage(chunk)) {
      const int next_chunk = pipe.rank == pipe.size - 1 ? chunk + 1 : chunk;
      pipe.comm->send(y.raw_data(), static_cast<std::size_t>(y.numel()), y.dtype(),
                      (pipe.rank + 1) % pipe.size, kDecodeTag + next_chunk);
      continue;
    }
    const std::int64_t h = config_.transformer.hidden_size, rows = y.numel() / h;
    normed = be.empty({rows, h}, info_.param_dtype);
    Norm::Saved saved;
    final_norm_.forward(be, y.view({rows, h}), normed, saved);
  }
  return normed;
}

Tensor LayerStackModel::decode_layers(const LayerContext& ctx, std::int64_t new_tokens,
                                      const std::function<Tensor()>& embed,
                                      const LayerInputs& inputs, DecodeState& state) const {
  const Shape shape{new_tokens, state.batch, config_.transformer.hidden_size};
  return decode_stages(ctx, shape, embed, [&](int chunk, const Tensor& x) {
    if (x.size(1) != state.batch || state.past + x.size(0) > state.max_tokens) {
      throw Error(name_ + ": decoding " + std::to_string(x.size(0)) + " tokens of " +
                  std::to_string(x.size(1)) + " sequences after " + std::to_string(state.past) +
                  " in a state for " + std::to_string(state.batch) + " sequences of " +
                  std::to_string(state.max_tokens));
    }
    return stack_.forward_cached(ctx, chunk, x, inputs, state.caches, state.past);
  });
}

Tensor LayerStackModel::decode_layers_ragged(const LayerContext& ctx,
                                             const std::function<Tensor()>& embed,
                                             const LayerInputs& shared,
                                             const std::vector<LayerInputs>& columns,
                                             std::span<DecodeState* const> states) const {
  const auto n = static_cast<std::int64_t>(states.size());
  std::vector<std::vector<Layer::Caches>*> caches;
  std::vector<std::int64_t> past;
  for (DecodeState* state : states) {
    if (state->batch != 1 || state->past + 1 > state->max_tokens) {
      throw Error(name_ +
                  ": a ragged decoding step needs states of one sequence with room for a "
                  "token (found " +
                  std::to_string(state->batch) + " sequences, " + std::to_string(state->past) +
                  " of " + std::to_string(state->max_tokens) + " tokens)");
    }
    caches.push_back(&state->caches);
    past.push_back(state->past);
  }
  const Shape shape{1, n, config_.transformer.hidden_size};
  return decode_stages(ctx, shape, embed, [&](int chunk, const Tensor& x) {
    if (x.size(0) != 1 || x.size(1) != n) {
      throw Error(name_ + ": a ragged decoding step takes one new token of each sequence");
    }
    return stack_.forward_ragged(ctx, chunk, x, shared, columns, caches, past);
  });
}

double LayerStackModel::flops_per_iteration(std::int64_t samples) const {
  // Forward + backward = 3 x forward, 2 FLOPs per multiply-add, attention counted at half (causal).
  const TransformerConfig& tc = config_.transformer;
  const double gbs = static_cast<double>(samples), s = static_cast<double>(info_.seq_length);
  const double l = static_cast<double>(tc.num_layers), h = static_cast<double>(tc.hidden_size);
  const double np = static_cast<double>(tc.num_attention_heads);
  const double ng = static_cast<double>(tc.num_query_groups);
  const double q_ratio = static_cast<double>(tc.kv_channels) * np / h;
  const double glu = tc.swiglu ? 1.5 : 1.0;
  const double ffn = static_cast<double>(tc.ffn_hidden_size);
  const double vocab = 6.0 * gbs * s * h * static_cast<double>(padded_vocab_);
  if (tc.moe.num_experts == 0) {
    return 12.0 * gbs * s * l * h * h * ((1.0 + ng / np + s / h / 2.0) * q_ratio + ffn / h * glu) +
           vocab;
  }
  // Megatron's MoE count: an MoE layer's MLP is its top-k experts' and the shared experts'.
  const MoeConfig& moe = tc.moe;
  const double moe_ffn =
      static_cast<double>(moe.ffn_hidden_size * moe.routing.topk + moe.shared_expert_ffn);
  double mlp = 0;
  for (std::int64_t layer = 0; layer < tc.num_layers; ++layer)
    mlp += (moe.is_moe_layer(layer) ? moe_ffn : ffn) / h * glu;
  return 12.0 * gbs * s * h * h * (l * (1.0 + ng / np + s / h / 2.0) * q_ratio + mlp) + vocab;
}

std::vector<std::string> LayerStackModel::auxiliary_loss_names() const {
  const MoeConfig& moe = config_.transformer.moe;
  bool any = false;
  for (std::int64_t l = 0; l < config_.transformer.num_layers; ++l)
    any = any || moe.is_moe_layer(l);
  std::vector<std::string> names;
  if (!any) return names;
  // Sorted as AuxLosses reports them.
  if (moe.load_balancing != LoadBalancing::none && moe.aux_loss_coeff > 0) {
    names.push_back(moe.load_balancing == LoadBalancing::seq_aux_loss ? "seq_load_balancing_loss"
                                                                      : "load_balancing_loss");
  }
  if (moe.z_loss_coeff > 0) names.push_back("z_loss");
  return names;
}

ModelDimensions LayerStackModel::dimensions() const {
  const TransformerConfig& tc = config_.transformer;
  return {tc.num_layers,      tc.hidden_size,   tc.num_attention_heads,
          tc.ffn_hidden_size, info_.seq_length, padded_vocab_};
}

Parameter* LayerStackModel::declare_output_weight(ParamFactory& factory, bool with_pre_process,
                                                  bool untied) {
  const TransformerConfig& tc = config_.transformer;
  if (untied) {
    Parameter* own = &factory.declare("output_layer.weight", {padded_vocab_, tc.hidden_size},
                                      ParamInit::normal, tc.init_method_std, true, Split{0, 1});
    own->narrowable = true;
    return own;
  }
  if (with_pre_process) return nullptr;
  Parameter* copy =
      &factory.declare("embedding.word_embeddings.weight", {padded_vocab_, tc.hidden_size},
                       ParamInit::normal, tc.init_method_std, true, Split{0, 1});
  copy->pipeline_holders = {0, info_.pipeline.size - 1};
  copy->narrowable = true;  // the last stage's copy only feeds the output layer
  return copy;
}

void LayerStackModel::share_word_embeddings(Parameter& word_embeddings, bool untied) {
  if (!untied && !holds_post_process() && info_.pipeline.size > 1) {
    word_embeddings.pipeline_holders = {0, info_.pipeline.size - 1};
  }
}

std::string LayerStackModel::describe_layout(const std::string& architecture) const {
  return describe_model_layout(architecture, params_.numel(), tp_, info_.pipeline);
}

std::string describe_model_layout(const std::string& architecture, std::int64_t numel,
                                  const TensorParallelism& tp, const PipelinePlacement& pipeline) {
  std::ostringstream out;
  out << architecture << ", " << numel << " parameters";
  // Megatron's "number of parameters on (tensor, pipeline) model parallel rank": this rank's.
  const bool pp = pipeline.size > 1;
  if (tp.split() || pp) out << " on this rank (";
  if (tp.split()) {
    out << "tensor-parallel rank " << tp.rank << " of " << tp.size
        << (tp.sp() ? ", sequence parallel" : "");
  }
  if (pp)
    out << (tp.split() ? "; " : "") << "pipeline stage " << pipeline.rank << " of "
        << pipeline.size;
  if (tp.split() || pp) out << ")";
  return out.str();
}

}  // namespace megatron::nn
