// `megatron-app plan --config FILE`: builds the model on the meta device (nothing allocated) and
// reports parameters per rank, memory for weights, gradients, optimizer state and activations,
// and model FLOPs per iteration, for the config's parallel layout.
#include <fmt/format.h>

#include <iostream>

#include "cli.h"
#include "commands/commands.h"
#include "megatron/error.h"
#include "megatron/model.h"
#include "megatron/tokenizer/tokenizer.h"
#include "megatron/train/batch_schedule.h"
#include "megatron/train/memory_plan.h"
#include "megatron/train/pipeline_schedule.h"
#include "plugin_objects.h"
#include "session.h"

namespace megatron::app {

namespace po = boost::program_options;

namespace {

std::string thousands(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// What the planned model is built from, read from the [data] table's tokenizer and sequence keys
// without opening any data file (the planned job's data need not be on this machine).
struct PlannedData {
  std::int64_t vocab = 0, seq = 0;
  SampleSpec fields;  // the per-sample shapes a model needs besides seq_length (T5's decoder)
};

PlannedData planned_data(const Session& session) {
  if (!session.selected_for("data")) {
    throw UsageError("plan: the config needs a [data] table (for seq_length and the tokenizer)");
  }
  const config::ConfigTable& data = session.config.table("data");
  // T5's datasets call the encoder length encoder_seq_length (Megatron accepts either).
  const char* seq_key = data.has("seq_length") ? "seq_length" : "encoder_seq_length";
  if (!data.has(seq_key) || !data.has("tokenizer_type")) {
    throw UsageError(
        "plan: [data] must give seq_length (or encoder_seq_length) and tokenizer_type");
  }
  TokenizerFiles files;
  if (data.has("vocab_file")) files.vocab_file = data.string("vocab_file");
  if (data.has("merge_file")) files.merge_file = data.string("merge_file");
  if (data.has("tokenizer_model")) files.tokenizer_model = data.string("tokenizer_model");
  if (data.has("vocab_extra_ids")) files.vocab_extra_ids = data.integer("vocab_extra_ids");
  const auto tokenizer = make_tokenizer(data.string("tokenizer_type"), files);
  PlannedData out{static_cast<std::int64_t>(tokenizer->vocab_size()), data.integer(seq_key), {}};
  // An encoder-decoder dataset's decoder tokens, as the t5 dataset declares them.
  if (data.has("decoder_seq_length")) {
    out.fields.push_back(
        {"text_dec", DType::i32, {data.integer("decoder_seq_length")}, FieldKind::token_ids});
  }
  return out;
}

}  // namespace

int run_plan(MpiRuntime& runtime, const std::vector<std::string>& args) {
  CommonOptions common;
  std::int64_t data_parallel = 1;
  po::options_description options(
      "megatron-app plan --config FILE [--data-parallel N]\n"
      "Builds the model on the meta device and reports per-rank parameters, memory and FLOPs for "
      "the config's layout. Runs on one process whatever the layout.\n\nOptions");
  add_common_options(options, common, true);
  options.add_options()("data-parallel", po::value(&data_parallel)->default_value(1),
                        "data-parallel size to plan for (world = TP x PP x CP x this)");
  parse_arguments("plan", args, options, common.help);
  if (common.help) {
    std::cout << options << "\n";
    return 0;
  }
  if (data_parallel < 1) throw UsageError("plan: --data-parallel must be at least 1");

  Session session = open_session(runtime, common, {});
  const config::CoreConfig& core = session.config.core();
  const PlannedData planned = planned_data(session);
  ParallelState single = ParallelState::create(runtime, ParallelSizes{});
  // The model is built once per pipeline stage, as that stage's ranks build it, on the meta
  // device: each stage's parameters are what the model declares there (tied copies included).
  ModelBuildInfo info;
  info.vocab_size = planned.vocab;
  info.seq_length = planned.seq;
  info.sample_fields = planned.fields;
  info.device = Device::meta();
  // Built as one tensor-parallel rank sees it, so the vocabulary is padded to a multiple of
  // make_vocab_size_divisible_by x TP exactly as in training (Megatron: 50257 -> 51200 at TP 8).
  info.tp_size = core.parallel.tensor_model_parallel_size;
  info.sequence_parallel = core.parallel.sequence_parallel;
  auto model = create_plugin<Model>(session, single, "model", "megatron::Model", "type = \"gpt\"");
  model->build(info);
  const ModelDimensions dims = model->dimensions();
  const train::PipelineLayout placement = train::pipeline_layout(core.parallel, dims);
  std::vector<std::unique_ptr<Model>> stage_models;
  std::vector<train::StageParameters> stages;
  for (int s = 0; s < placement.pipeline_size; ++s) {
    ModelBuildInfo stage = info;
    stage.pipeline.rank = s;
    stage.pipeline.size = placement.pipeline_size;
    std::int64_t layers = 0;
    for (int c = 0; c < placement.virtual_size; ++c) {
      stage.pipeline.chunks.push_back(train::stage_layers(placement, s, c));
      layers += stage.pipeline.chunks.back().count;
    }
    if (placement.pipeline_size == 1) {
      stages.push_back({&model->parameters(), layers});
      break;
    }
    stage_models.push_back(
        create_plugin<Model>(session, single, "model", "megatron::Model", "type = \"gpt\""));
    stage_models.back()->build(stage);
    stages.push_back({&stage_models.back()->parameters(), layers});
  }

  const train::BatchSchedule batches =
      train::BatchSchedule::from_config(core.training, data_parallel);
  train::PlanLayout layout;
  layout.tensor = core.parallel.tensor_model_parallel_size;
  layout.pipeline = core.parallel.pipeline_model_parallel_size;
  layout.data = data_parallel;
  layout.micro_batch_size = batches.micro_batch_size();
  layout.num_micro_batches = batches.at(1LL << 62, false).num_micro_batches;
  layout.overlap_grad_reduce = core.ddp.overlap_grad_reduce;
  layout.bucket_size = core.ddp.ddp_bucket_size;
  layout.precision = core.training.bf16   ? train::Precision::bf16
                     : core.training.fp16 ? train::Precision::fp16
                                          : train::Precision::fp32;
  const train::MemoryPlan plan = train::plan_memory(stages, dims, layout);

  const char* precision = core.training.bf16 ? "bf16" : core.training.fp16 ? "fp16" : "fp32";
  const std::int64_t world =
      layout.tensor * layout.pipeline * core.parallel.context_parallel_size * data_parallel;
  std::cout << model->describe() << "\n";
  std::cout << fmt::format(
      "layout: tensor {} x pipeline {} x data {} = {} ranks; micro batch {}, global batch {} "
      "({} micro-batches per rank); {}\n",
      layout.tensor, layout.pipeline, layout.data, world, layout.micro_batch_size,
      batches.global_batch_size(), layout.num_micro_batches, precision);
  std::cout << "total parameters: " << thousands(plan.total_parameters) << "\n";
  std::cout << "parameters per rank (one tensor-parallel rank of each pipeline stage):\n";
  for (const auto& s : plan.stages) {
    std::cout << fmt::format("  stage {:3d}: {:3d} layers, {:>18} parameters\n", s.stage, s.layers,
                             thousands(s.parameters));
  }
  const double n = static_cast<double>(plan.max_rank_parameters);
  std::cout << fmt::format(
      "weights + gradients + optimizer state per rank (largest stage, {} parameters):\n"
      "  without the distributed optimizer: {} ({:g} bytes/parameter)\n"
      "  with the distributed optimizer over {} data-parallel ranks: {} ({:.4g} bytes/parameter)\n",
      thousands(plan.max_rank_parameters), train::format_bytes(n * plan.bytes_per_parameter),
      plan.bytes_per_parameter, data_parallel,
      train::format_bytes(n * plan.bytes_per_parameter_distributed),
      plan.bytes_per_parameter_distributed);
  std::cout << fmt::format(
      "  (distributed optimizer: {} gradient bucket(s), {} buffer elements with padding, at most "
      "{} optimizer elements per data-parallel rank)\n",
      plan.gradient_buckets, thousands(plan.distributed_buffer_elements),
      thousands(plan.max_optimizer_shard_elements));
  std::cout << fmt::format(
      "activations per rank (first stage, micro-batches in flight, 16-bit):\n"
      "  no recomputation: {}\n  selective recomputation: {}\n  full recomputation: {}\n",
      train::format_bytes(plan.activations_no_recompute),
      train::format_bytes(plan.activations_selective), train::format_bytes(plan.activations_full));
  std::cout << fmt::format("model FLOPs per iteration (global batch {}): {:.4e}\n",
                           batches.global_batch_size(),
                           model->flops_per_iteration(batches.global_batch_size()));
  return 0;
}

}  // namespace megatron::app
