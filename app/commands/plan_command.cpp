// `megatron-app plan --config FILE`: builds the model on the meta device (nothing allocated) and
// reports parameters per rank, memory for weights, gradients, optimizer state and activations,
// and model FLOPs per iteration, for the config's parallel layout.
#include <fmt/format.h>

#include <iostream>

#include "cli.h"
#include "commands/commands.h"
#include "commands/run_plan.h"
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
  const RunPlan run = plan_run(session, runtime, core.parallel, data_parallel);
  const Model* model = run.model.get();
  const train::PlanLayout& layout = run.layout;
  const train::MemoryPlan& plan = run.memory;

  const char* precision = core.training.bf16 ? "bf16" : core.training.fp16 ? "fp16" : "fp32";
  const std::int64_t world =
      layout.tensor * layout.pipeline * core.parallel.context_parallel_size * data_parallel;
  std::cout << model->describe() << "\n";
  const std::string context =
      layout.context > 1 ? fmt::format(" x context {}", layout.context) : std::string();
  std::cout << fmt::format(
      "layout: tensor {} x pipeline {}{} x data {} = {} ranks; micro batch {}, global batch {} "
      "({} micro-batches per rank); {}\n",
      layout.tensor, layout.pipeline, context, layout.data, world, layout.micro_batch_size,
      run.global_batch_size, layout.num_micro_batches, precision);
  std::cout << "total parameters: " << thousands(plan.total_parameters) << "\n";
  if (plan.active_parameters != plan.total_parameters) {
    std::cout << "active parameters (per token, Mixture of Experts): "
              << thousands(plan.active_parameters) << "\n";
  }
  std::cout << "parameters per rank (one tensor-parallel rank of each pipeline stage):\n";
  for (const auto& s : plan.stages) {
    std::cout << fmt::format("  stage {:3d}: {:3d} layers, {:>18} parameters\n", s.stage, s.layers,
                             thousands(s.parameters));
  }
  const double n = static_cast<double>(plan.max_rank_parameters);
  std::cout << fmt::format(
      "weights + gradients + optimizer state per rank (largest stage, {} parameters):\n"
      "  without the distributed optimizer: {} ({:g} bytes/parameter)\n"
      "  with the distributed optimizer over {} data-parallel{} ranks: {} ({:.4g} "
      "bytes/parameter)\n",
      thousands(plan.max_rank_parameters), train::format_bytes(n * plan.bytes_per_parameter),
      plan.bytes_per_parameter, data_parallel * layout.context,
      layout.context > 1 ? " x context-parallel" : "",
      train::format_bytes(n * plan.bytes_per_parameter_distributed),
      plan.bytes_per_parameter_distributed);
  std::cout << fmt::format(
      "  (distributed optimizer: {} gradient bucket(s), {} buffer elements with padding, at most "
      "{} optimizer elements per data-parallel rank)\n",
      plan.gradient_buckets, thousands(plan.distributed_buffer_elements),
      thousands(plan.max_optimizer_shard_elements));
  std::cout << fmt::format(
      "activations per rank (first stage, micro-batches in flight, 16-bit{}):\n"
      "  no recomputation: {}\n  selective recomputation: {}\n  full recomputation: {}\n",
      layout.context > 1 ? fmt::format(", 1/{} of each sequence's tokens", layout.context)
                         : std::string(),
      train::format_bytes(plan.activations_no_recompute),
      train::format_bytes(plan.activations_selective), train::format_bytes(plan.activations_full));
  std::cout << fmt::format(
      "memory per rank for this config (what training checks before it starts; [ddp] "
      "use_distributed_optimizer = {}, [model] recompute_granularity, {} activations): {}\n",
      core.ddp.use_distributed_optimizer,
      layout.precision == train::Precision::fp32 ? "fp32" : "16-bit",
      train::format_bytes(needed_bytes_per_rank(run, session)));
  const double flops = model->flops_per_iteration(run.global_batch_size);
  std::cout << fmt::format("model FLOPs per iteration (global batch {}): {:.4e}\n",
                           run.global_batch_size, flops);
  // The training log's MFU denominator: the same figure when configured.
  const double peak = core.runtime.peak_tflops;
  if (peak > 0) {
    std::cout << fmt::format(
        "MFU peak: {:.3f} TFLOP/s per rank ([runtime] peak_tflops); an iteration takes at least "
        "{:.3f} s on {} ranks (MFU 100%)\n",
        peak, flops / (peak * 1e12 * static_cast<double>(world)), world);
  } else {
    std::cout << "MFU peak: measured when training starts (a GEMM on the rank's device); set "
                 "[runtime] peak_tflops to plan with one\n";
  }
  return 0;
}

}  // namespace megatron::app
