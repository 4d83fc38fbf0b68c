// check_memory: the run's plan against the host memory budget, and the smallest layout that fits.
#include "commands/memory_preflight.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "commands/run_plan.h"
#include "megatron/backend/cuda_status.h"
#include "megatron/error.h"
#include "megatron/train/host_memory.h"

namespace megatron::app {

namespace {

struct Candidate {
  int tensor = 1, pipeline = 1;
  double need = 0;
};

// The smallest layout (fewest model-parallel ranks, then the least pipeline: tensor parallelism
// first, as Megatron's examples within a node) whose largest rank needs at most `budget`, with the
// run's data-parallel size. Tensor sizes 1-8; pipeline sizes dividing the layer count. Layouts
// the model refuses (heads not divisible, ...) are skipped.
std::optional<Candidate> smallest_fitting(Session& session, MpiRuntime& runtime,
                                          std::int64_t layers, std::int64_t data_parallel,
                                          double budget) {
  const config::ParallelConfig& configured = session.config.core().parallel;
  std::vector<Candidate> candidates;
  for (int tp : {1, 2, 4, 8})
    for (std::int64_t pp = 1; pp <= layers; ++pp)
      if (layers % pp == 0) candidates.push_back({tp, static_cast<int>(pp), 0});
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    const int ma = a.tensor * a.pipeline, mb = b.tensor * b.pipeline;
    return ma != mb ? ma < mb : a.pipeline < b.pipeline;
  });
  for (Candidate& c : candidates) {
    config::ParallelConfig parallel = configured;
    parallel.tensor_model_parallel_size = c.tensor;
    parallel.pipeline_model_parallel_size = c.pipeline;
    parallel.sequence_parallel = configured.sequence_parallel && c.tensor > 1;
    parallel.num_layers_per_virtual_pipeline_stage.reset();
    parallel.decoder_first_pipeline_num_layers = 0;
    parallel.decoder_last_pipeline_num_layers = 0;
    try {
      const RunPlan plan = plan_run(session, runtime, parallel, data_parallel, true);
      c.need = needed_bytes_per_rank(plan, session);
    } catch (const Error&) {
      continue;  // a layout this model cannot take
    }
    if (c.need <= budget) return c;
  }
  return std::nullopt;
}

// A CUDA rank's tensors live on its device: its free memory, shared by the node's ranks on it.
// Host memory otherwise.
train::MemoryBudget memory_budget(const Device& device, MpiRuntime& runtime) {
  if (device.is_cuda()) {
    if (const std::optional<CudaMemoryInfo> info = cuda_memory_info(device.index)) {
      return train::device_memory_budget(
          device.str(), info->free_bytes,
          train::ranks_sharing_device(device.index, cuda_status().device_count,
                                      runtime.local_size()));
    }
  }
  return train::host_memory_budget(train::read_host_memory_facts(), runtime.local_size());
}

}  // namespace

void check_memory(Session& session, MpiRuntime& runtime, const Device& device,
                  const std::string& config_file) {
  const config::CoreConfig& core = session.config.core();
  if (core.runtime.skip_memory_check) return;
  const config::ParallelConfig& parallel = core.parallel;
  const std::int64_t model_parallel = std::int64_t(parallel.tensor_model_parallel_size) *
                                      parallel.pipeline_model_parallel_size *
                                      parallel.context_parallel_size;
  const std::int64_t data_parallel =
      std::max<std::int64_t>(1, runtime.world_size() / model_parallel);
  std::optional<RunPlan> planned;
  try {
    planned = plan_run(session, runtime, parallel, data_parallel);
  } catch (const Error& e) {
    // What the plan cannot build (a dataset the model cannot read, a bad vocabulary) the
    // plugins refuse next with their own messages; the pre-flight does not stand in for them.
    session.log->debug("memory pre-flight skipped: {}", e.what());
    return;
  }
  const RunPlan& plan = *planned;
  const double need = needed_bytes_per_rank(plan, session);
  const train::MemoryBudget budget = memory_budget(device, runtime);
  session.log->debug("memory pre-flight: this rank needs {}, may use {} ({})",
                     train::format_bytes(need), train::format_bytes(budget.rank_bytes),
                     budget.source.empty() ? "no limit known" : budget.source);
  if (need <= budget.rank_bytes) return;

  const std::string context = parallel.context_parallel_size > 1
                                  ? fmt::format(" x context {}", parallel.context_parallel_size)
                                  : std::string();
  std::string message = fmt::format(
      "memory pre-flight: each rank of this run (tensor {} x pipeline {}{} x data {}) needs {} for "
      "weights, gradients, optimizer state and activations, as `megatron-app plan` computes it, "
      "but this rank can use {} ({} {}, shared by {} rank(s) {}). ",
      parallel.tensor_model_parallel_size, parallel.pipeline_model_parallel_size, context,
      data_parallel, train::format_bytes(need), train::format_bytes(budget.rank_bytes),
      budget.source, train::format_bytes(budget.node_bytes), budget.sharing,
      device.is_cuda() ? "using " + device.str() : std::string("on this node"));
  const std::optional<Candidate> fit =
      smallest_fitting(session, runtime, plan.dims.num_layers, data_parallel, budget.rank_bytes);
  if (fit) {
    message += fmt::format(
        "The smallest layout that fits in {} per rank is tensor {} x pipeline {}{} x data {} ({} "
        "ranks, {} each): `megatron-app plan --config {} --set "
        "parallel.tensor_model_parallel_size={} --set parallel.pipeline_model_parallel_size={}` "
        "shows it. ",
        train::format_bytes(budget.rank_bytes), fit->tensor, fit->pipeline, context, data_parallel,
        std::int64_t(fit->tensor) * fit->pipeline * parallel.context_parallel_size * data_parallel,
        train::format_bytes(fit->need), config_file, fit->tensor, fit->pipeline);
  } else {
    message += fmt::format(
        "No layout up to tensor 8 x pipeline {} fits in {} per rank: use machines with more "
        "memory, the distributed optimizer, recomputation or a smaller micro batch. ",
        plan.dims.num_layers, train::format_bytes(budget.rank_bytes));
  }
  message += "Set [runtime] skip_memory_check = true to start anyway.";
  throw ConfigError(message);
}

}  // namespace megatron::app
