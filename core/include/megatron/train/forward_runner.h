// Forward-only passes of a built model at any tensor/pipeline layout, for evaluation tasks:
// micro-batches go through every pipeline stage with dropout off, and every rank of the
// model-parallel group gets the last stage's loss terms and per-token outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "megatron/config/core_config.h"
#include "megatron/model.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::train {

class ForwardRunner {
 public:
  // `model` must have been built (model_build_info) for this rank; both outlive the runner.
  ForwardRunner(Model& model, ParallelState& parallel, const config::CoreConfig& core);

  // Collective over the pipeline group (every stage calls it with the same number of equally
  // sized micro-batches; each stage reads the fields it needs). Returns the micro-batches' summed
  // loss terms and, with `outputs`, their StepResult::outputs stacked in micro-batch order,
  // the same on every tensor- and pipeline-parallel rank. Not reduced over data-parallel ranks:
  // each replica evaluates its own micro-batches.
  StepResult run(const std::vector<Batch>& micro_batches, bool outputs);

 private:
  Model& model_;
  ParallelState& parallel_;
  const config::CoreConfig& core_;
};

}  // namespace megatron::train
