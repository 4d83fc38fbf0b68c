// The public pretrained-checkpoint loader (megatron/train/pretrained.h) and the per-parameter
// slice reader the trainer's resume shares with it.
#include "megatron/train/pretrained.h"

#include <algorithm>

#include "checkpoint_slices.h"
#include "megatron/backend/backend.h"
#include "megatron/config/raw_config.h"
#include "megatron/error.h"

namespace megatron::train {

namespace {

const std::string kModel = "model/";

bool starts_with_any(const std::string& name, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](const std::string& p) { return name.rfind(p, 0) == 0; });
}

}  // namespace

std::string config_model_type(const std::string& config_toml) {
  if (config_toml.empty()) return "";
  try {
    const config::RawConfig raw = config::RawConfig::load_string(config_toml, "(config)");
    const config::RawTable* model = raw.find("model");
    if (!model) return "";
    auto type = model->keys.find("type");
    return type == model->keys.end() ? "" : type->second.string;
  } catch (const Error&) {
    return "";  // an unreadable stored config does not hide the loader's tensor checks
  }
}

namespace {

// A vocabulary-sized tensor whose row count differs: Megatron pads the vocabulary to a multiple
// of make_vocab_size_divisible_by x TP, so the same model saved at another TP may have more rows.
std::string padding_hint(const Parameter& p, const Shape& stored) {
  if (p.partition_dim != 0 || stored.size() != p.global_shape.size() || stored.empty()) return "";
  for (std::size_t d = 1; d < stored.size(); ++d)
    if (stored[d] != p.global_shape[d]) return "";
  return "; if only the vocabulary padding differs, set [model] make_vocab_size_divisible_by so "
         "that it times tensor_model_parallel_size divides " +
         std::to_string(stored[0]) + " (the saved padded vocabulary)";
}

}  // namespace

void read_parameter_slice(const checkpoint::CheckpointReader& reader, const std::string& path,
                          const Parameter& p, Tensor& live, const std::string& missing_hint) {
  const std::string file = reader.file().string();
  if (!reader.has(path)) {
    const char* what = path.rfind("optimizer/", 0) == 0 ? "optimizer state" : "tensor";
    throw Error("checkpoint " + file + " has no " + what + " '" + path + "'" + missing_hint);
  }
  const Shape stored = reader.shape(path);
  if (stored != p.global_shape) {
    throw Error("checkpoint " + file + ": tensor '" + path + "' has shape " + shape_str(stored) +
                ", the model expects " + shape_str(p.global_shape) +
                " (is [model] the same as when it was saved?)");
  }
  const bool sharded = tensor_parallel_shard(p);
  Tensor host = Tensor::empty(shard_shape(p), live.dtype());
  reader.read_slice(path, sharded ? p.partition_dim : -1,
                    sharded ? shard_runs(p) : std::vector<ShardRun>{}, host);
  if (host.shape() != live.shape()) {
    throw Error("checkpoint " + file + ": tensor '" + path + "' gives this rank " +
                shape_str(host.shape()) + ", the live tensor is " + shape_str(live.shape()));
  }
  backend_for(live.device()).copy(host, live);
}

namespace {

// Loads `params`, and `buffers` where the checkpoint has them (a buffer it lacks keeps its
// declared value, as a checkpoint saved before the buffer existed).
PretrainedReport load_tensors(const std::filesystem::path& path, const ParameterSet& params,
                              const ParameterSet* buffers, ParallelState& parallel,
                              const PretrainedRules& rules, Logger& log) {
  const checkpoint::CheckpointReader reader(checkpoint::resolve_checkpoint(path));
  const std::string file = reader.file().string();
  PretrainedReport report;
  report.file = reader.file();
  report.iteration = reader.attributes().iteration;
  report.config_toml = reader.attributes().config_toml;

  const std::string saved = config_model_type(report.config_toml);
  if (!rules.model_type.empty()) {
    if (!saved.empty() && saved != rules.model_type) {
      throw ConfigError("checkpoint " + file + " was saved from a '" + saved +
                        "' model; this run builds a '" + rules.model_type +
                        "' model ([model] type): use a checkpoint of the same model");
    }
  }

  std::vector<Parameter*> tensors;
  for (const auto& p : params)
    tensors.push_back(p.get());
  const std::size_t first_buffer = tensors.size();
  if (buffers) {
    for (const auto& p : *buffers)
      tensors.push_back(p.get());
  }
  auto is_buffer = [&](std::size_t i) { return i >= first_buffer; };
  auto find = [&](const std::string& name) {
    return params.find(name) || (buffers && buffers->find(name));
  };

  const bool other_type =
      !rules.run_model_type.empty() && !saved.empty() && saved != rules.run_model_type;
  const bool extends = rules.extend_other_type && other_type;
  const std::string other_type_hint =
      other_type ? "; it was saved from a '" + saved + "' model: to start this '" +
                       rules.run_model_type + "' model from it, set [checkpoint] finetune = true"
                 : " (is [model] the same as when it was saved?)";

  // Every check first, so a refused checkpoint leaves the model as it was built.
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Parameter* p = tensors[i];
    const std::string stored_path = kModel + p->name;
    if (!reader.has(stored_path)) {
      if (is_buffer(i) || starts_with_any(p->name, rules.initialise) || extends) continue;
      throw ConfigError("checkpoint " + file + " has no tensor '" + p->name +
                        "', which the model has with shape " + shape_str(p->global_shape) +
                        other_type_hint);
    }
    const Shape stored = reader.shape(stored_path);
    if (stored != p->global_shape) {
      throw ConfigError("checkpoint " + file + ": tensor '" + p->name + "' has shape " +
                        shape_str(stored) + " there, the model expects " +
                        shape_str(p->global_shape) + padding_hint(*p, stored));
    }
  }
  // Every model tensor of the checkpoint must be held by some pipeline stage, or be skipped; all
  // ranks read the same file, so the names line up across ranks.
  std::vector<std::string> saved_names;
  for (const std::string& name : reader.names())
    if (name.rfind(kModel, 0) == 0) saved_names.push_back(name.substr(kModel.size()));
  std::vector<std::int32_t> held(saved_names.size(), 0);
  for (std::size_t i = 0; i < saved_names.size(); ++i)
    held[i] = find(saved_names[i]);
  if (parallel.pp_size() > 1) parallel.comm(Group::pipeline).all_reduce(held, ReduceOp::max);
  for (std::size_t i = 0; i < saved_names.size(); ++i) {
    if (held[i]) continue;
    if (!starts_with_any(saved_names[i], rules.skip)) {
      throw ConfigError("checkpoint " + file + " has tensor '" + saved_names[i] + "' of shape " +
                        shape_str(reader.shape(kModel + saved_names[i])) +
                        ", which this model does not have (is [model] the same as when it was "
                        "saved?)");
    }
    report.skipped.push_back(saved_names[i]);
  }

  for (Parameter* p : tensors) {
    if (!reader.has(kModel + p->name)) {
      report.initialised.push_back(p->name);
      continue;
    }
    read_parameter_slice(reader, kModel + p->name, *p, p->value, "");
    report.loaded.push_back(p->name);
  }
  // Each stage logs its own new tensors once (its first tensor- and data-parallel rank); the
  // skipped ones are the same everywhere and logged by world rank 0.
  if (parallel.tp_rank() <= 0 && parallel.dp_rank() <= 0) {
    for (const std::string& name : report.initialised)
      log.info("pretrained checkpoint {}: '{}' is not in it; initialised", file, name);
  }
  if (parallel.world_rank() == 0) {
    for (const std::string& name : report.skipped)
      log.info("pretrained checkpoint {}: '{}' is not used by this model; skipped", file, name);
  }
  if (extends && parallel.tp_rank() <= 0 && parallel.dp_rank() <= 0) {
    log.info(
        "pretrained checkpoint {} (a '{}' model) starts this '{}' model: {} tensors loaded, {} "
        "not in it initialised{}",
        file, saved, rules.run_model_type, report.loaded.size(), report.initialised.size(),
        parallel.pp_size() > 1 ? " (this pipeline stage's)" : "");
  }
  return report;
}

}  // namespace

PretrainedReport load_pretrained(const std::filesystem::path& path, ParameterSet& params,
                                 ParallelState& parallel, const PretrainedRules& rules,
                                 Logger& log) {
  return load_tensors(path, params, nullptr, parallel, rules, log);
}

PretrainedReport load_pretrained(const std::filesystem::path& path, Model& model,
                                 ParallelState& parallel, const PretrainedRules& rules,
                                 Logger& log) {
  return load_tensors(path, model.parameters(), model.buffers(), parallel, rules, log);
}

}  // namespace megatron::train
