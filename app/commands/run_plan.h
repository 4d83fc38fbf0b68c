// The plan of a run at a given parallel layout, as `plan` prints it and the memory pre-flight
// checks it: the model built per pipeline stage on the meta device (nothing allocated), its
// parameters per rank, and memory for weights, gradients, optimizer state and activations.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "megatron/config/core_config.h"
#include "megatron/model.h"
#include "megatron/parallel/mpi_runtime.h"
#include "megatron/train/memory_plan.h"
#include "session.h"

namespace megatron::app {

struct RunPlan {
  std::unique_ptr<Model> model;  // the whole model as one tensor-parallel rank sees it
  std::vector<std::unique_ptr<Model>> stage_models;
  ModelDimensions dims;
  std::int64_t global_batch_size = 0;
  train::PlanLayout layout;
  train::MemoryPlan memory;
};

// Plans the session's model at `parallel` (its tensor/pipeline sizes and pipeline split) with
// `data_parallel` ranks. `edge_stages_only` builds just the first and last pipeline stages, which
// hold the embedding and the head on top of an even share of layers: enough for the largest
// rank's need, and cheap when many layouts are tried. Throws megatron::Error for a layout the
// model or the pipeline split refuses.
RunPlan plan_run(Session& session, MpiRuntime& runtime, const config::ParallelConfig& parallel,
                 std::int64_t data_parallel, bool edge_stages_only = false);

// Bytes one rank of the largest stage needs: weights, gradients and optimizer state (sharded
// when [ddp] use_distributed_optimizer) and the activations of the [model] recompute_granularity
// (the fused attention never stores the s x s scores, so "none" costs what "selective" does), at
// 4 bytes per activation in fp32 runs (the plan's formulas count 16-bit ones).
double needed_bytes_per_rank(const RunPlan& plan, const Session& session);

}  // namespace megatron::app
