// What the trainer saves and restores: parameters, optimizer state, progress, schedule, loss
// scaler and dropout seed; Megatron's finetune / no_load_optim / no_load_rng semantics. Every rank
// writes its own slices of the global tensors and reads back the slices of whatever layout it
// runs at (see Note [Sharded checkpoints] in checkpoint.h).
#include <cstdint>
#include <filesystem>
#include <set>
#include <vector>

#include "checkpoint_slices.h"
#include "grad_buffer.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "megatron/train/pretrained.h"

#include "trainer_impl.h"

namespace megatron::train {

namespace {

const std::string kModel = "model/";
const std::string kOptimizer = "optimizer/";

// Host view of a tensor for writing (a copy only for device tensors).
Tensor to_host(const Tensor& t) {
  if (t.device() == Device::cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  backend_for(t.device()).copy(t, h);
  return h;
}

// The parameter an optimizer state key "<state>/<param name>" belongs to.
std::pair<std::string, std::string> split_state_key(const std::string& key) {
  const std::size_t slash = key.rfind('/');
  if (slash == std::string::npos) {
    throw Error("optimizer state '" + key + "' is not named <state>/<parameter>");
  }
  return {key.substr(0, slash), key.substr(slash + 1)};
}

}  // namespace

std::string Trainer::Impl::save_checkpoint() {
  if (ddp) ddp->wait_param_gather();
  const ParallelState& parallel = services.parallel;
  checkpoint::CheckpointState s;
  s.iteration = iteration;
  s.consumed_train_samples = consumed_train;
  s.consumed_valid_samples = consumed_valid;
  s.skipped_iterations = skipped_iterations;
  s.config_toml = services.config_toml;
  s.int_attributes["optimizer.steps"] = optimizer_steps;
  s.int_attributes["scheduler.num_steps"] = scheduler->num_steps();
  s.int_attributes["rng.seed"] = static_cast<std::int64_t>(seed);
  if (scaler) {
    const LossScalerState ls = scaler->state();
    s.float_attributes["loss_scaler.scale"] = ls.scale;
    s.int_attributes["loss_scaler.growth_tracker"] = ls.growth_tracker;
    s.int_attributes["loss_scaler.hysteresis_tracker"] = ls.hysteresis_tracker;
  }
  // The layout is metadata only: nothing else in the file depends on it.
  s.int_attributes["layout.tensor_model_parallel_size"] = parallel.tp_size();
  s.int_attributes["layout.pipeline_model_parallel_size"] = parallel.pp_size();
  s.int_attributes["layout.data_parallel_size"] = parallel.dp_size();
  s.int_attributes["layout.context_parallel_size"] = parallel.cp_size();
  s.int_attributes["layout.use_distributed_optimizer"] = ddp && ddp->distributed();

  // One data-parallel replica writes (context-parallel ranks hold the same weights: the first
  // of them); within it, replicated tensors come from tp rank 0 only. Under expert parallelism
  // the experts' replica is an expert-data-parallel one: its expert-parallel ranks write their
  // experts.
  const bool dp_writer = parallel.dp_rank() == 0 && parallel.cp_rank() == 0;
  const bool tp_first = parallel.tp_rank() <= 0;
  const bool expert_split = parallel.ep_size() > 1, edp_writer = parallel.edp_rank() == 0;
  std::map<std::string, checkpoint::TensorSlice> slices;
  auto add = [&](const std::string& path, const Parameter& p, const Tensor& local) {
    checkpoint::TensorSlice t;
    t.global_shape = p.global_shape;
    t.dtype = local.dtype();
    if (tensor_parallel_shard(p)) {
      t.partition_dim = p.partition_dim;
      t.runs = shard_runs(p);
    }
    // A parameter's copies on several pipeline stages are equal; its first holder writes it.
    const bool replica_writer = expert_split && p.experts > 0 ? edp_writer : dp_writer;
    t.write = replica_writer && (tensor_parallel_shard(p) || tp_first) &&
              p.first_pipeline_holder(parallel.pp_rank());
    if (t.write) t.local = to_host(local);
    slices.emplace(path, std::move(t));
  };
  ParameterSet& params = model.parameters();
  for (auto& p : params)
    add(kModel + p->name, *p, p->value);
  if (ParameterSet* buffers = model.buffers()) {
    for (auto& p : *buffers)
      add(kModel + p->name, *p, p->value);
  }

  std::map<std::string, Tensor> state = optimizer.state();
  if (ddp && ddp->distributed()) {
    // Each rank holds its owned ranges of the state; gather them over each buffer's group (data x
    // context, and the expert-data-parallel one for the experts' buffer) into buffers
    // laid out like the gradient buffers (zeros elsewhere, so a sum is a gather), then store them
    // like parameters.
    std::map<std::string, std::size_t> shard_of;
    for (std::size_t i = 0; i < ddp->owned().size(); ++i)
      shard_of.emplace(ddp->owned()[i].param->name, i);
    std::set<std::string> kinds;
    for (const auto& [key, tensor] : state)
      kinds.insert(split_state_key(key).first);
    Communicator& data = parallel.comm(Group::data_context);
    const auto count = static_cast<std::int64_t>(kinds.size());
    if (data.all_reduce_value(count, ReduceOp::max) != count ||
        data.all_reduce_value(count, ReduceOp::min) != count) {
      throw Error(
          "cannot save the distributed optimizer: data-parallel ranks hold different "
          "kinds of optimizer state");
    }
    const std::vector<BufferDomain>& domains = ddp->domains();
    for (const std::string& kind : kinds) {
      for (std::size_t d = 0; d < domains.size(); ++d) {
        const BufferLayout& layout = domains[d].layout;
        Tensor buffer = Tensor::zeros({std::max<std::int64_t>(layout.numel, 1)}, DType::f32);
        for (const auto& [key, tensor] : state) {
          const auto [k, name] = split_state_key(key);
          if (k != kind) continue;
          const OwnedRange& r = ddp->owned().at(shard_of.at(name));
          if (r.domain != d) continue;
          Tensor dst = buffer.slice(0, layout.param_offset[r.slot] + r.begin, r.end - r.begin);
          backend_for(Device::cpu()).copy(to_host(tensor).to(DType::f32), dst);
        }
        Communicator& group = parallel.comm(d == 0 ? Group::data_context : Group::expert_data);
        group.all_reduce(buffer.data<float>(), static_cast<std::size_t>(buffer.numel()), DType::f32,
                         ReduceOp::sum);
        for (std::size_t slot = 0; slot < domains[d].params.size(); ++slot) {
          const Parameter& p = params[domains[d].params[slot]];
          add(kOptimizer + kind + "/" + p.name, p,
              buffer.slice(0, layout.param_offset[slot], layout.param_numel[slot])
                  .view(p.value.shape()));
        }
      }
    }
  } else {
    for (auto& [key, tensor] : state) {
      const Parameter* p = params.find(split_state_key(key).second);
      if (!p) throw Error("optimizer state '" + key + "' names no parameter of the model");
      add(kOptimizer + key, *p, tensor);
    }
  }

  const std::string written =
      checkpoint::save_checkpoint_sharded(services.core.checkpoint.save, s, slices,
                                          parallel.comm(Group::world))
          .string();
  if (parallel.world_rank() == 0) {
    services.log.info("saved checkpoint at iteration {} to {}", iteration, written);
  }
  return written;
}

void Trainer::Impl::load_checkpoint() {
  const config::CheckpointConfig& cc = services.core.checkpoint;
  const std::filesystem::path dir = cc.load;
  if (std::filesystem::is_directory(dir) && !checkpoint::latest_iteration(dir)) {
    services.log.warn("[checkpoint] load = '{}' holds no checkpoint yet; training from scratch",
                      cc.load);
    return;
  }
  // The resume pattern (save = load, as Megatron's example scripts use) on its first launch: the
  // directory the save will create does not exist yet. A load path that is not also the save
  // path and does not exist stays an error below: most likely a typo.
  if (!std::filesystem::exists(dir) && !cc.save.empty() &&
      dir.lexically_normal() == std::filesystem::path(cc.save).lexically_normal()) {
    services.log.warn("[checkpoint] load = '{}' does not exist yet; training from scratch",
                      cc.load);
    return;
  }
  if (!std::filesystem::exists(dir)) {
    throw ConfigError("checkpoint.load: " + dir.string() +
                      ": no such checkpoint file or directory (to resume from the save directory "
                      "on a first launch, set load = save)");
  }
  const std::vector<std::filesystem::path> files = checkpoint::checkpoints_from_latest(dir);
  Communicator& world = services.parallel.comm(Group::world);
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::string damage;
    try {
      load_checkpoint_file(files[i]);
    } catch (const CheckpointDamagedError& e) {
      damage = e.what();
    }
    // Each rank read only its own slices, so every rank learns whether any found damage and all
    // move on (or stop) together. A failed read is the last thing of a load: no rank is left in
    // a collective.
    const std::int64_t first = world.all_reduce_value<std::int64_t>(
        damage.empty() ? world.size() : world.rank(), ReduceOp::min);
    if (first == world.size()) return;
    if (damage.empty()) {
      damage = "world rank " + std::to_string(first) + " found checkpoint " + files[i].string() +
               " damaged (the tensor is named there)";
    }
    const bool older = i + 1 < files.size();
    if (!cc.fallback_to_previous) {
      throw CheckpointDamagedError(
          damage + "; it is left as it is. " +
          (older ? "Set [checkpoint] fallback_to_previous = true to resume from the newest intact "
                   "checkpoint (" +
                       files[i + 1].filename().string() + " is the next older)"
                 : std::string("There is no older checkpoint in '" + cc.load + "'")));
    }
    if (!older) {
      throw CheckpointDamagedError(damage + "; no older checkpoint in '" + cc.load +
                                   "' to fall back to");
    }
    services.log.warn("{}; falling back to {} ([checkpoint] fallback_to_previous)", damage,
                      files[i + 1].string());
  }
}

void Trainer::Impl::load_checkpoint_file(const std::filesystem::path& path) {
  const config::CheckpointConfig& cc = services.core.checkpoint;
  const bool weights_only = cc.finetune;
  // The weights through the public loader (no tensor may differ; fine-tuning from another model
  // type's checkpoint initialises what it lacks), then what resuming adds.
  PretrainedRules rules;
  rules.run_model_type = config_model_type(services.config_toml);
  rules.extend_other_type = weights_only;
  const PretrainedReport loaded =
      load_pretrained(path, model, services.parallel, rules, services.log);
  const checkpoint::CheckpointReader reader(loaded.file);
  const std::string file = reader.file().string();
  const checkpoint::CheckpointState& s = reader.attributes();
  ParameterSet& params = model.parameters();
  services.log.info("loaded model weights from {} (iteration {})", file, s.iteration);
  if (weights_only) return;  // [checkpoint] finetune: iteration and data position start at 0

  iteration = s.iteration;
  consumed_train = s.consumed_train_samples;
  consumed_valid = s.consumed_valid_samples;
  skipped_iterations = s.skipped_iterations;
  if (!cc.no_load_optim) {
    const std::string hint = " (saved with another optimizer? set no_load_optim = true to skip it)";
    std::map<std::string, std::size_t> shard_of;
    if (ddp && ddp->distributed()) {
      for (std::size_t i = 0; i < ddp->owned().size(); ++i)
        shard_of.emplace(ddp->owned()[i].param->name, i);
    }
    for (auto& [key, live] : optimizer.state()) {
      const std::string name = split_state_key(key).second;
      if (ddp && ddp->distributed()) {
        // The stored state is the whole local shard; this rank keeps its owned range of it.
        const OwnedRange& r = ddp->owned().at(shard_of.at(name));
        Tensor whole = Tensor::empty(r.param->value.shape(), DType::f32);
        read_parameter_slice(reader, kOptimizer + key, *r.param, whole, hint);
        const Tensor mine = whole.view({whole.numel()}).slice(0, r.begin, r.end - r.begin);
        backend_for(live.device())
            .copy(mine.contiguous().view(live.shape()).to(live.dtype()), live);
      } else {
        const Parameter* p = params.find(name);
        if (!p) throw Error("optimizer state '" + key + "' names no parameter of the model");
        read_parameter_slice(reader, kOptimizer + key, *p, live, hint);
      }
    }
    optimizer_steps = s.int_attributes.at("optimizer.steps");
    scheduler->set_num_steps(s.int_attributes.at("scheduler.num_steps"));
    if (scaler && s.float_attributes.count("loss_scaler.scale")) {
      scaler->load_state({static_cast<float>(s.float_attributes.at("loss_scaler.scale")),
                          s.int_attributes.at("loss_scaler.growth_tracker"),
                          s.int_attributes.at("loss_scaler.hysteresis_tracker")});
    }
  } else {
    // Megatron without optimizer state: the schedule continues from the data position.
    scheduler->set_num_steps(consumed_train);
  }
  if (!cc.no_load_rng && s.int_attributes.count("rng.seed")) {
    seed = static_cast<std::uint64_t>(s.int_attributes.at("rng.seed"));
  }
  services.log.info("resuming at iteration {} ({} samples consumed)", iteration, consumed_train);
}

}  // namespace megatron::train
