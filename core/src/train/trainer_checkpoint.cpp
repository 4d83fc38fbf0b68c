// What the trainer saves and restores: parameters, optimizer state, progress, schedule, loss
// scaler and dropout seed; Megatron's finetune / no_load_optim / no_load_rng semantics.
#include <filesystem>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
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

void copy_into(const std::string& file, const std::string& path, const Tensor& stored,
               Tensor& live) {
  if (stored.shape() != live.shape()) {
    throw Error("checkpoint " + file + ": tensor '" + path + "' has shape " +
                shape_str(stored.shape()) + ", the model expects " + shape_str(live.shape()) +
                " (is [model] the same as when it was saved?)");
  }
  Backend& be = backend_for(live.device());
  if (stored.dtype() == live.dtype()) {
    be.copy(stored, live);
  } else {
    be.copy(stored.to(live.dtype()), live);
  }
}

}  // namespace

std::string Trainer::Impl::save_checkpoint() {
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
  for (auto& p : model.parameters())
    s.tensors[kModel + p->name] = to_host(p->value);
  for (auto& [name, tensor] : optimizer.state())
    s.tensors[kOptimizer + name] = to_host(tensor);

  // One writer while there is one copy of every tensor per data-parallel group (issue 5 brings
  // sharded writes); the others wait so nobody reads a half-written marker.
  std::string written;
  if (services.parallel.world_rank() == 0) {
    written = checkpoint::save_checkpoint(services.core.checkpoint.save, s).string();
    services.log.info("saved checkpoint at iteration {} to {}", iteration, written);
  }
  services.parallel.comm(Group::world).barrier();
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
  const bool finetune = cc.finetune;
  std::vector<std::string> skip;
  if (finetune || cc.no_load_optim) skip.push_back(kOptimizer);
  const std::string file = checkpoint::resolve_checkpoint(dir).string();
  checkpoint::CheckpointState s = checkpoint::load_checkpoint(file, skip);

  for (auto& p : model.parameters()) {
    auto it = s.tensors.find(kModel + p->name);
    if (it == s.tensors.end()) {
      throw Error("checkpoint " + file + " has no tensor '" + kModel + p->name +
                  "' (was it saved from a different model?)");
    }
    copy_into(file, it->first, it->second, p->value);
  }
  for (const auto& [path, tensor] : s.tensors) {
    if (path.rfind(kModel, 0) == 0 && !model.parameters().find(path.substr(kModel.size()))) {
      throw Error("checkpoint " + file + " has tensor '" + path +
                  "', which this model does not have (is [model] the same as when it was saved?)");
    }
  }
  services.log.info("loaded model weights from {} (iteration {})", file, s.iteration);
  if (finetune) return;  // weights only; iteration and data position start at 0

  iteration = s.iteration;
  consumed_train = s.consumed_train_samples;
  consumed_valid = s.consumed_valid_samples;
  skipped_iterations = s.skipped_iterations;
  if (!cc.no_load_optim) {
    for (auto& [name, live] : optimizer.state()) {
      auto it = s.tensors.find(kOptimizer + name);
      if (it == s.tensors.end()) {
        throw Error("checkpoint " + file + " has no optimizer state '" + kOptimizer + name +
                    "' (saved with another optimizer? set no_load_optim = true to skip it)");
      }
      copy_into(file, it->first, it->second, live);
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
