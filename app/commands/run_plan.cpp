// plan_run: the model per pipeline stage on the meta device and train::plan_memory over it.
#include "commands/run_plan.h"

#include "megatron/error.h"
#include "megatron/plugin.h"
#include "megatron/train/batch_schedule.h"
#include "megatron/train/pipeline_schedule.h"
#include "plugin_objects.h"

namespace megatron::app {

namespace {

// What the [data] plugin will produce, asked of its descriptor: no data file is opened (the planned
// job's data need not be on this machine), and the app names no dataset's keys.
PlannedSamples planned_data(const Session& session) {
  const SelectedPlugin* data = session.selected_for("data");
  if (!data) {
    throw UsageError("plan: the config needs a [data] table (for seq_length and the tokenizer)");
  }
  const PluginDescriptor& descriptor = *data->record->descriptor;
  if (!descriptor.plan_samples) {
    throw UsageError("plan: the dataset plugin '" + data->record->name + "' (" +
                     data->record->file.string() +
                     ") cannot say what samples it will produce without its data");
  }
  return descriptor.plan_samples(session.config.table("data"), session.config.core());
}

}  // namespace

RunPlan plan_run(Session& session, MpiRuntime& runtime, const config::ParallelConfig& parallel,
                 std::int64_t data_parallel, bool edge_stages_only) {
  const config::CoreConfig& core = session.config.core();
  const PlannedSamples planned = planned_data(session);
  ParallelState single = ParallelState::create(runtime, ParallelSizes{});
  RunPlan out;
  // The model is built once per pipeline stage, as that stage's ranks build it, on the meta
  // device: each stage's parameters are what the model declares there (tied copies included).
  ModelBuildInfo info;
  info.vocab_size = planned.vocab_size;
  info.seq_length = planned.seq_length;
  info.sample_fields = planned.fields;
  info.device = Device::meta();
  // Built as one tensor-parallel rank sees it, so the vocabulary is padded to a multiple of
  // make_vocab_size_divisible_by x TP exactly as in training (Megatron: 50257 -> 51200 at TP 8).
  info.tp_size = parallel.tensor_model_parallel_size;
  info.sequence_parallel = parallel.sequence_parallel;
  info.etp_size = parallel.expert_tensor_parallel_size > 0 ? parallel.expert_tensor_parallel_size
                                                           : parallel.tensor_model_parallel_size;
  out.model = create_plugin<Model>(session, single, "model", "megatron::Model", "type = \"gpt\"");
  out.model->build(info);
  out.dims = out.model->dimensions();
  const train::PipelineLayout placement = train::pipeline_layout(parallel, out.dims);
  std::vector<train::StageParameters> stages;
  for (int s = 0; s < placement.pipeline_size; ++s) {
    if (edge_stages_only && s != 0 && s != placement.pipeline_size - 1) continue;
    ModelBuildInfo stage = info;
    stage.pipeline.rank = s;
    stage.pipeline.size = placement.pipeline_size;
    std::int64_t layers = 0;
    for (int c = 0; c < placement.virtual_size; ++c) {
      stage.pipeline.chunks.push_back(train::stage_layers(placement, s, c));
      layers += stage.pipeline.chunks.back().count;
    }
    if (placement.pipeline_size == 1) {
      stages.push_back({&out.model->parameters(), layers});
      break;
    }
    out.stage_models.push_back(
        create_plugin<Model>(session, single, "model", "megatron::Model", "type = \"gpt\""));
    out.stage_models.back()->build(stage);
    stages.push_back({&out.stage_models.back()->parameters(), layers});
  }

  const train::BatchSchedule batches =
      train::BatchSchedule::from_config(core.training, data_parallel);
  out.global_batch_size = batches.global_batch_size();
  train::PlanLayout& layout = out.layout;
  layout.tensor = parallel.tensor_model_parallel_size;
  layout.pipeline = parallel.pipeline_model_parallel_size;
  layout.data = data_parallel;
  layout.context = parallel.context_parallel_size;
  layout.expert = parallel.expert_model_parallel_size;
  // Megatron carves the expert-parallel group out of the data-parallel ranks (expert tensor
  // parallelism = tensor parallelism here).
  if ((data_parallel * parallel.context_parallel_size) % layout.expert != 0) {
    throw ConfigError("[parallel] expert_model_parallel_size " + std::to_string(layout.expert) +
                      " must divide the data-parallel x context-parallel size " +
                      std::to_string(data_parallel * parallel.context_parallel_size));
  }
  layout.micro_batch_size = batches.micro_batch_size();
  layout.num_micro_batches = batches.at(1LL << 62, false).num_micro_batches;
  layout.overlap_grad_reduce = core.ddp.overlap_grad_reduce;
  layout.bucket_size = core.ddp.ddp_bucket_size;
  layout.precision = core.training.bf16   ? train::Precision::bf16
                     : core.training.fp16 ? train::Precision::fp16
                                          : train::Precision::fp32;
  out.memory = train::plan_memory(stages, out.dims, layout);
  return out;
}

double needed_bytes_per_rank(const RunPlan& plan, const Session& session) {
  const config::CoreConfig& core = session.config.core();
  const train::MemoryPlan& m = plan.memory;
  const double state = static_cast<double>(m.max_rank_parameters) *
                       (core.ddp.use_distributed_optimizer ? m.bytes_per_parameter_distributed
                                                           : m.bytes_per_parameter);
  std::string recompute;
  if (session.selected_for("model")) {
    const config::ConfigTable& model = session.config.table("model");
    if (model.has("recompute_granularity")) recompute = model.string("recompute_granularity");
  }
  const double activations = recompute == "full" ? m.activations_full : m.activations_selective;
  const double activation_bytes = plan.layout.precision == train::Precision::fp32 ? 2.0 : 1.0;
  return state + activations * activation_bytes;
}

}  // namespace megatron::app
