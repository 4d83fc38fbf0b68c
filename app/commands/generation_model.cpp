// Loading a decoder-only language model and its tokenizer for generation.
#include "commands/generation_model.h"

#include <fmt/format.h>

#include "megatron/error.h"
#include "megatron/inference/followed_decoder.h"
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
  if (runtime.world_size() != tp || core.parallel.pipeline_model_parallel_size > 1 ||
      core.parallel.sequence_parallel) {
    throw UsageError(fmt::format(
        "megatron-app {}: runs on one rank or with tensor parallelism only (mpirun -n {} for "
        "[parallel] tensor_model_parallel_size = {}; no pipeline or sequence parallelism); the "
        "checkpoint may come from any layout",
        command, tp, tp));
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
  model_->build(train::model_build_info(*parallel_, core, *model_, vocab_size(),
                                        dataset_->seq_length(), fields));
  train::PretrainedRules rules;
  rules.model_type = type_;
  const train::PretrainedReport report =
      train::load_pretrained(checkpoint_to_load(command, load, core.checkpoint), *model_,
                             *parallel_, rules, *session_.log);
  if (!recompute && !lm->can_decode()) {
    session_.log->info("{}: a block keeps no decoding cache; each token recomputes the sequence",
                       type_);
    recompute = true;
  }
  decoder_ = recompute ? inference::recomputing_decoder(*lm, fields, dataset_->seq_length(),
                                                        tokenizer().eod())
                       : inference::kv_cache_decoder(*lm, dataset_->seq_length());
  if (tp > 1) {
    group_ = &parallel_->comm(Group::tensor);
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
