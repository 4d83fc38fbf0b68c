// Runs a pipeline rank's share of one training step (or evaluation pass): its schedule's forward
// and backward passes, with activations and their gradients exchanged between virtual stages.
#pragma once

#include <cstdint>
#include <functional>

#include "megatron/model.h"
#include "megatron/parallel/communicator.h"
#include "megatron/train/pipeline_schedule.h"

namespace megatron::train {

struct PipelineStep {
  const PipelineLayout& layout;
  int rank = 0;        // this rank's pipeline stage
  Communicator& comm;  // the pipeline group: group rank = pipeline stage
  std::int64_t num_micro_batches = 1;
  std::int64_t micro_batch_size = 1;
  Device device = Device::cpu();             // where activations are received (the model's device)
  bool backward = true;                      // false: forward only (evaluation), in schedule order
  std::function<Batch(std::int64_t)> batch;  // micro-batch k's samples
  std::function<StepOptions(std::int64_t)>
      options;  // micro-batch k's options (backward is set here)
};

// Buffers for what a virtual stage receives (or the gradients it gets back), one per field of
// `spec`, on `device`: device communicators (NCCL) refuse host memory, so a GPU model's stages
// receive into GPU memory.
NamedTensors allocate_stage_buffers(const SampleSpec& spec, Device device);

// Returns the summed loss figures of this rank's micro-batches: the model's losses on the last
// virtual stage, and on any stage the logged-only terms its layers report (MoE's auxiliary
// losses; empty without them). Sends are asynchronous and all complete before it
// returns; receives block, which the schedules' orders make deadlock-free (see
// tests/train/pipeline_schedule_test.cpp).
StepResult run_pipeline_step(Model& model, const PipelineStep& step);

}  // namespace megatron::train
