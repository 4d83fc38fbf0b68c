// Loading a decoder-only language model and its tokenizer for generation.
#include "commands/generation_model.h"

#include <fmt/format.h>

#include "megatron/error.h"
#include "megatron/inference/followed_decoder.h"
#include "megatron/inference/held_weights.h"
#include "megatron/nn/language_model.h"
#include "megatron/train/model_setup.h"
#include "megatron/train/pretrained.h"
#include "plugin_objects.h"

namespace megatron::app {

namespace {

// Where the weights come from: `load`, else [checkpoint] load, else save (the main job's).
std::string checkpoint_to_load(const std::string& command, const std::string& load,
                               const config::CheckpointConfig& c) {
  if (!load.empty()) return load;
  if (!c.load.empty()) return c.load;
  if (!c.save.empty()) return c.save;
  throw UsageError("megatron-app " + command +
                   ": no checkpoint: give --load, or set [checkpoint] load or save");
}

}  // namespace

GenerationModel::GenerationModel(MpiRuntime& runtime, const CommonOptions& common,
                                 const std::string& command, const std::string& load,
                                 bool recompute)
    : session_(open_session(runtime, common, {})) {
  const config::CoreConfig& core = session_.config.core();
  const std::int64_t tp = core.parallel.tensor_model_parallel_size;
  const std::int64_t pp = core.parallel.pipeline_model_parallel_size;
  if (runtime.world_size() != tp * pp || core.parallel.sequence_parallel) {
    throw UsageError(fmt::format(
        "megatron-app {}: runs on tensor_model_parallel_size x pipeline_model_parallel_size "
        "ranks (mpirun -n {} for [parallel] {} x {}; no data or sequence parallelism); the "
        "checkpoint may come from any layout",
        command, tp * pp, tp, pp));
  }
  parallel_.emplace(ParallelState::create(runtime, parallel_sizes(core.parallel)));
  dataset_ =
      create_plugin<Dataset>(session_, *parallel_, "data", "megatron::Dataset", "type = \"gpt\"");
  model_ = create_plugin<Model>(session_, *parallel_, "model", "megatron::Model", "type = \"gpt\"");
  auto* lm = dynamic_cast<nn::LanguageModel*>(model_.get());
  type_ = session_.selected_for("model")->record->name;
  if (!lm) {
    throw UsageError("megatron-app " + command + ": [model] type '" + type_ +
                     "' is not a decoder-only language model (gpt, mamba, ...); it cannot "
                     "generate text");
  }
  const SampleSpec fields = dataset_->sample_fields();
  const ModelBuildInfo info = train::model_build_info(*parallel_, core, *model_, vocab_size(),
                                                      dataset_->seq_length(), fields);
  model_->build(info);
  train::PretrainedRules rules;
  rules.model_type = type_;
  const train::PretrainedReport report =
      train::load_pretrained(checkpoint_to_load(command, load, core.checkpoint), *model_,
                             *parallel_, rules, *session_.log);
  const inference::HeldWeights held =
      inference::hold_for_generation(model_->parameters(), info.compute_dtype);
  session_.log->info("weights: {:.1f} MiB held on this rank ({:.1f} MiB with gradients){}",
                     static_cast<double>(held.bytes) / (1 << 20),
                     static_cast<double>(held.bytes_before) / (1 << 20),
                     held.narrowed > 0 ? fmt::format(", {} weights in {}", held.narrowed,
                                                     dtype_name(info.compute_dtype))
                                       : std::string());
  if (!recompute && !lm->can_decode()) {
    session_.log->info("{}: a block keeps no decoding cache; each token recomputes the sequence",
                       type_);
    recompute = true;
  }
  if (recompute && runtime.world_size() > 1) {
    throw UsageError(fmt::format(
        "megatron-app {}: recomputing each sequence runs on one rank; {} ranks decode with the "
        "model's caches{}",
        command, runtime.world_size(),
        lm->can_decode() ? " (drop --recompute)" : ", which a block of this model does not keep"));
  }
  decoder_ = recompute ? inference::recomputing_decoder(*lm, fields, dataset_->seq_length(),
                                                        tokenizer().eod())
                       : inference::kv_cache_decoder(*lm, dataset_->seq_length());
  if (runtime.world_size() > 1) {
    // Every rank of the model follows rank 0's calls: tensor-parallel peers meet in each
    // layer's collectives, pipeline stages pass the activations on.
    group_ = &parallel_->comm(Group::model);
    if (leader()) decoder_ = inference::leading_decoder(std::move(decoder_), *group_);
  }
  session_.log->info("generating from {} (iteration {}){}", report.file.string(), report.iteration,
                     recompute ? ", recomputing the sequence for each token" : "");
}

bool GenerationModel::leader() const {
  return group_ == nullptr || group_->rank() == 0;
}

void GenerationModel::follow() {
  if (leader()) throw Error("GenerationModel::follow: rank 0 leads");
  inference::follow_decoder(*decoder_, *group_);
}

// The plugin objects go before the session that holds their libraries.
GenerationModel::~GenerationModel() {
  decoder_.reset();
  model_.reset();
  dataset_.reset();
}

}  // namespace megatron::app
