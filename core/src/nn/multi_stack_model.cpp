// MultiStackModel: stage roles of several stacks, build (whole-model initialisation order),
// forward and backward of a stage's stacks with the memory each stack hands the next, in
// Megatron's (S, B, h) activation layout.
#include "megatron/nn/multi_stack_model.h"

#include <algorithm>

#include "megatron/error.h"
#include "megatron/nn/layer_stack_model.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::nn {

namespace {

// A copy, owned by this stage, of the tensor `name` another stage sent (activations or their
// gradients), checked against the shape this stage expects.
Tensor received_copy(Backend& be, const NamedTensors& tensors, const std::string& name,
                     const std::string& what, const Shape& shape, DType dtype) {
  const Tensor& t = named_tensor(tensors, name, what);
  if (t.shape() != shape) {
    throw Error(what + ": '" + name + "' is a " + t.describe() + ", expected " + shape_str(shape));
  }
  Tensor out = be.empty(shape, dtype);
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

MultiStackModel::MultiStackModel(ModelConfig config, std::string name)
    : config_(std::move(config)), name_(std::move(name)) {}

std::vector<MultiStackModel::StackRole> MultiStackModel::stage_roles(
    const PipelinePlacement& pl) const {
  std::vector<StackRole> roles(stacks_.size());
  if (pl.size == 1 && pl.num_chunks() == 1) {
    for (std::size_t k = 0; k < stacks_.size(); ++k)
      roles[k] = {{0, stacks_[k].num_layers}, true, true};
    return roles;
  }
  if (pl.num_chunks() > 1) {
    throw ConfigError("[parallel] num_layers_per_virtual_pipeline_stage: " + name_ +
                      " has no interleaved pipeline schedule (nor has Megatron's "
                      "encoder-and-decoder model)");
  }
  // Megatron runs whole stages of each stack in turn: the stages' equal share of the layers must
  // split every stack.
  std::int64_t total = 0;
  bool splits = true;
  std::string order, counts;
  for (const StackSpec& s : stacks_) {
    total += s.num_layers;
    if (stage_share_ == 0 || total % stage_share_ != 0) splits = false;
    order += (order.empty() ? "whole " : ", then whole ") + s.prefix + " stages";
    counts += (counts.empty() ? "" : " + ") + std::to_string(s.num_layers);
  }
  if (!splits || total % pl.size != 0) {
    throw ConfigError("[parallel] pipeline_model_parallel_size " + std::to_string(pl.size) + ": " +
                      name_ + " runs " + order + ", each holding an equal share of the " + counts +
                      " layers; choose a size whose share divides every stack's count");
  }
  const LayerRange mine = pl.chunks.empty() ? LayerRange{0, total} : pl.chunks[0];
  if (mine != LayerRange{pl.rank * stage_share_, stage_share_}) {
    throw ConfigError("[parallel] " + name_ + "'s pipeline stages hold equal shares of its " +
                      "layers (stage " + std::to_string(pl.rank) + ": layers " +
                      std::to_string(pl.rank * stage_share_) + ".." +
                      std::to_string(pl.rank * stage_share_ + stage_share_ - 1) +
                      "); decoder_first/last_pipeline_num_layers do not apply");
  }
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < stacks_.size(); ++k) {
    const std::int64_t n = stacks_[k].num_layers;
    if (mine.first >= offset && mine.first < offset + n) {
      roles[k] = {{mine.first - offset, mine.count},
                  mine.first == offset,
                  mine.first + mine.count == offset + n};
    }
    offset += n;
  }
  return roles;
}

std::size_t MultiStackModel::stack_at_stage(int stage) const {
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < stacks_.size(); ++k) {
    offset += stacks_[k].num_layers;
    if (stage * stage_share_ < offset) return k;
  }
  throw Error(name_ + ": no stack at pipeline stage " + std::to_string(stage));
}

std::vector<int> MultiStackModel::stages_of(std::size_t stack) const {
  std::vector<int> out;
  for (int r = 0; r < info_.pipeline.size; ++r)
    if (info_.pipeline.size == 1 || stack_at_stage(r) == stack) out.push_back(r);
  return out;
}

void MultiStackModel::declare_all(ParamFactory& factory, const std::vector<StackRole>& roles) {
  ParameterSet& ps = factory.params;
  const TransformerConfig& tc = config_.transformer;
  layer_stacks_.clear();
  layer_stacks_.resize(stacks_.size());
  final_norms_.assign(stacks_.size(), Norm());
  norm_params_.assign(stacks_.size(), {});
  // Every stack's input parameters come first, then each stack's layers and final norm, then the
  // head (Megatron-core's T5Model order). Dropout sites: the pre-process's, then each stack's
  // layers in turn, whichever of them this stage holds.
  const std::size_t start = ps.size();
  std::uint64_t site = declare_pre_process(factory, roles);
  const std::size_t after_pre = ps.size();
  std::size_t post_begin = ps.size();
  for (std::size_t k = 0; k < stacks_.size(); ++k) {
    const StackSpec& s = stacks_[k];
    // Megatron-core builds each stack from a copy of the config with its own layer count, which
    // also sets the count its output layers' initialisation is scaled by.
    ModelConfig stack_config = config_;
    stack_config.transformer.num_layers = s.num_layers;
    if (roles[k].layers.count > 0) {
      layer_stacks_[k].declare(factory, s.prefix + ".layers", stack_config, s.layer_spec,
                               {roles[k].layers}, site);
    }
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      site += Layer::dropout_sites(s.layer_spec(l));
    const std::size_t norm_begin = ps.size();
    if (roles[k].final_norm) {
      final_norms_[k] = Norm::declare(factory, s.prefix + ".final_layernorm", tc.hidden_size,
                                      tc.normalization, tc.norm_epsilon);
    }
    norm_params_[k] = params_between(ps, norm_begin, ps.size());
    post_begin = norm_begin;
  }
  if (roles.back().final_norm) declare_post_process(factory, roles);
  pre_params_ = params_between(ps, start, after_pre);
  post_params_ = params_between(ps, post_begin, ps.size());
}

void MultiStackModel::build(const ModelBuildInfo& info) {
  info_ = info;
  if (info.cp_size > 1) {
    throw ConfigError("[parallel] context_parallel_size = " + std::to_string(info.cp_size) + ": " +
                      name_ + ": context parallelism is not supported for this model yet");
  }
  if (info.pipeline.size < 1 || info.pipeline.rank < 0 ||
      info.pipeline.rank >= info.pipeline.size) {
    throw Error(name_ + ": pipeline rank " + std::to_string(info.pipeline.rank) + " of " +
                std::to_string(info.pipeline.size));
  }
  stacks_ = prepare(info);
  std::vector<std::int64_t> seqs;
  std::int64_t total = 0;
  for (const StackSpec& s : stacks_) {
    seqs.push_back(s.seq_length);
    total += s.num_layers;
  }
  const std::int64_t longest = *std::max_element(seqs.begin(), seqs.end());
  tp_ = model_tensor_parallelism(info, name_, seqs);
  padded_vocab_ =
      megatron::padded_vocab_size(info.vocab_size, config_.make_vocab_size_divisible_by, tp_.size);
  // One position table serves every stack (Megatron's max_sequence_length); default: the longest.
  if (config_.max_position_embeddings == 0) config_.max_position_embeddings = longest;
  if (config_.position_embedding == PositionEmbedding::learned_absolute &&
      longest > config_.max_position_embeddings) {
    throw ConfigError("[model] max_position_embeddings " +
                      std::to_string(config_.max_position_embeddings) +
                      " is smaller than the longest sequence, " + std::to_string(longest));
  }
  rotary_.assign(stacks_.size(), std::nullopt);
  for (std::size_t k = 0; k < stacks_.size(); ++k) {
    if (config_.transformer.rotary_dim > 0 && !info.device.is_meta()) {
      rotary_[k] = make_rotary_tables(stacks_[k].seq_length, config_.transformer.rotary_dim,
                                      config_.rotary_base, info.param_dtype);
    }
  }
  stage_share_ = total / info.pipeline.size;
  roles_ = stage_roles(info.pipeline);

  const ExpertParallelism ep = model_expert_parallelism(info, name_);
  // The whole model on the meta device first: its declaration order is the initialisation order,
  // so every layout (and every stage's copy of a shared parameter) initialises alike.
  probe_params_ = ParameterSet();
  ParameterSet probe_buffers;
  ParamFactory probe{probe_params_, Device::meta(), info.param_dtype, tp_, ep, &probe_buffers};
  std::vector<StackRole> whole(stacks_.size());
  for (std::size_t k = 0; k < stacks_.size(); ++k)
    whole[k] = {{0, stacks_[k].num_layers}, true, true};
  declare_all(probe, whole);
  params_ = ParameterSet();
  buffers_ = ParameterSet();
  ParamFactory factory{params_, info.device, info.param_dtype, tp_, ep, &buffers_};
  declare_all(factory, roles_);
  assign_init_indices(params_, probe_params_, name_);
  if (!info.device.is_meta()) initialize_parameters(backend_for(info.device), params_, info.seed);
}

void MultiStackModel::end_training_iteration() {
  for (LayerStack& stack : layer_stacks_)
    stack.end_training_iteration(backend_for(info_.device), info_.data_comm);
}

SampleSpec MultiStackModel::stage_inputs(int virtual_stage, std::int64_t micro_batch_size) const {
  const std::size_t k = stack_at_stage(virtual_stage);
  const DType dt = info_.param_dtype;
  const std::int64_t h = config_.transformer.hidden_size;
  SampleSpec spec;
  if (stages_of(k).front() != virtual_stage) {
    spec.push_back(
        {"hidden", dt, {local_seq(stacks_[k].seq_length), micro_batch_size, h}, FieldKind::value});
  }
  if (k > 0) {
    spec.push_back({output_name(k - 1),
                    dt,
                    {local_seq(stacks_[k - 1].seq_length), micro_batch_size, h},
                    FieldKind::value});
  }
  return spec;
}

Tensor MultiStackModel::forward_stack(const LayerContext& ctx, std::size_t k, const Batch& batch,
                                      const NamedTensors& input, const StepOptions& options,
                                      Pending& p) {
  Backend& be = ctx.backend;
  StackRun& run = p.runs[k];
  const std::int64_t h = config_.transformer.hidden_size;
  const std::string what = name_ + "'s stage inputs";
  run.inputs.set_rotary(rotary_[k] ? &*rotary_[k] : nullptr);
  if (k > 0) {
    Tensor& memory = p.outputs[k - 1];
    if (!memory.defined()) {
      memory =
          received_copy(be, input, output_name(k - 1), what,
                        {local_seq(stacks_[k - 1].seq_length), batch.size(), h}, info_.param_dtype);
    }
    run.inputs.set(layer_input::memory, memory);
    // Every layer reading the memory adds its gradient here.
    if (options.backward) {
      p.output_grads[k - 1] = be.empty(memory.shape(), memory.dtype());
      run.inputs.collect_gradient(layer_input::memory, p.output_grads[k - 1]);
    }
  }
  stack_inputs(ctx, k, batch, options, run.inputs, run.state);
  const Tensor x =
      roles_[k].pre_process
          ? pre_forward(ctx, k, batch, run.state.get())
          : received_copy(be, input, "hidden", what,
                          {local_seq(stacks_[k].seq_length), batch.size(), h}, info_.param_dtype);
  return layer_stacks_[k].forward(ctx, 0, x, run.inputs, options.backward, run.layers, options);
}

Tensor MultiStackModel::final_norm_forward(Backend& be, std::size_t k, const Tensor& y,
                                           StackRun& run) {
  const std::int64_t h = y.size(2), rows = y.size(0) * y.size(1);
  run.x_rows = y.view({rows, h});
  Tensor normed = be.empty({rows, h}, info_.param_dtype);
  final_norms_[k].forward(be, run.x_rows, normed, run.norm_saved);
  return normed.view(y.shape());
}

Tensor MultiStackModel::final_norm_backward(Backend& be, std::size_t k, const Tensor& dnormed,
                                            StackRun& run) {
  const std::int64_t rows = run.x_rows.size(0), h = run.x_rows.size(1);
  const std::int64_t s = local_seq(stacks_[k].seq_length);
  Tensor dy = be.empty({s, rows / s, h}, info_.param_dtype);
  Tensor dy_rows = dy.view({rows, h});
  final_norms_[k].backward(be, dnormed.view({rows, h}), run.x_rows, run.norm_saved, dy_rows);
  return dy;
}

Model::ChunkOutput MultiStackModel::forward_chunk(int chunk, std::int64_t micro_batch,
                                                  const Batch& batch, const NamedTensors& input,
                                                  const StepOptions& options) {
  if (chunk != 0) {
    throw Error(name_ + ": no pipeline chunk " + std::to_string(chunk) + " on this stage");
  }
  const LayerContext ctx = layer_context(info_, options);
  Backend& be = ctx.backend;
  Pending p;
  p.batch_size = batch.size();
  p.runs.resize(stacks_.size());
  p.outputs.resize(stacks_.size());
  p.output_grads.resize(stacks_.size());
  if (options.params_needed && !pre_params_.empty()) options.params_needed(pre_params_);
  ChunkOutput out;
  const std::size_t last = stacks_.size() - 1;
  for (std::size_t k = 0; k <= last; ++k) {
    if (roles_[k].layers.count == 0) continue;
    const Tensor y = forward_stack(ctx, k, batch, input, options, p);
    if (!roles_[k].final_norm) {
      out.activations.emplace_back("hidden", y);
      if (k > 0) out.activations.emplace_back(output_name(k - 1), p.outputs[k - 1]);
      break;
    }
    if (k == last) {
      if (options.params_needed) options.params_needed(post_params_);
      const Tensor normed = final_norm_forward(be, k, y, p.runs[k]);
      out.loss = post_forward(ctx, batch, normed.view({y.size(0) * y.size(1), y.size(2)}), options,
                              p.post);
      break;
    }
    if (options.params_needed) options.params_needed(norm_params_[k]);
    p.outputs[k] = final_norm_forward(be, k, y, p.runs[k]);
    if (roles_[k + 1].layers.count == 0) {
      out.activations.emplace_back(output_name(k), p.outputs[k]);
      break;
    }
  }
  if (options.backward && !pending_.emplace(micro_batch, std::move(p)).second) {
    throw Error(name_ + ": forward of micro-batch " + std::to_string(micro_batch) +
                " run twice before its backward");
  }
  return out;
}

NamedTensors MultiStackModel::backward_chunk(int chunk, std::int64_t micro_batch,
                                             const NamedTensors& output_grad,
                                             const StepOptions& options) {
  auto it = pending_.find(micro_batch);
  if (chunk != 0 || it == pending_.end()) {
    throw Error(name_ + ": backward of chunk " + std::to_string(chunk) + ", micro-batch " +
                std::to_string(micro_batch) + " without its forward");
  }
  Pending p = std::move(it->second);
  pending_.erase(it);
  const LayerContext ctx = layer_context(info_, options);
  Backend& be = ctx.backend;
  const std::string what = name_ + "'s stage gradients";
  const std::size_t last = stacks_.size() - 1;
  NamedTensors result;
  for (std::size_t k = last + 1; k-- > 0;) {
    if (roles_[k].layers.count == 0) continue;
    StackRun& run = p.runs[k];
    Tensor dy;
    if (roles_[k].final_norm && k == last) {
      const Tensor dnormed = post_backward(ctx, p.post.get());
      p.post.reset();
      dy = final_norm_backward(be, k, dnormed, run);
      if (options.grads_ready && !post_params_.empty()) options.grads_ready(post_params_);
    } else if (roles_[k].final_norm) {
      Tensor dnormed = p.output_grads[k];  // added by the next stack's layers on this stage
      if (roles_[k + 1].layers.count == 0) {
        dnormed = received_copy(be, output_grad, output_name(k), what, p.outputs[k].shape(),
                                info_.param_dtype);
      }
      dy = final_norm_backward(be, k, dnormed, run);
      if (options.grads_ready) options.grads_ready(norm_params_[k]);
    } else {
      dy = received_copy(
          be, output_grad, "hidden", what,
          {local_seq(stacks_[k].seq_length), p.batch_size, config_.transformer.hidden_size},
          info_.param_dtype);
    }
    if (k > 0) {
      // The memory's gradient: what later stages of this stack added, or nothing yet.
      Tensor& dmemory = p.output_grads[k - 1];
      if (roles_[k].final_norm) {
        be.fill(dmemory, 0.0);
      } else {
        be.copy(named_tensor(output_grad, output_name(k - 1), what), dmemory);
      }
    }
    const Tensor dx = layer_stacks_[k].backward(ctx, 0, dy, run.inputs, run.layers, options);
    inputs_backward(ctx, k, run.state.get());
    if (roles_[k].pre_process) {
      pre_backward(ctx, k, run.state.get(), dx);
    } else {
      result.emplace_back("hidden", dx);
    }
    if (k > 0 && roles_[k - 1].layers.count == 0) {
      result.emplace_back(output_name(k - 1), p.output_grads[k - 1]);
      break;
    }
  }
  if (options.grads_ready && !pre_params_.empty()) options.grads_ready(pre_params_);
  return result;
}

StepResult MultiStackModel::step(const Batch& batch, const StepOptions& options) {
  return step_whole_model(*this, name_, info_.pipeline.size == 1, batch, options);
}

}  // namespace megatron::nn
