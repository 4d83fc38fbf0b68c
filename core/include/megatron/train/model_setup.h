// How the host builds a model for this rank: the ModelBuildInfo the parallel state and the core
// config give it (device, seed, tensor-parallel group, pipeline placement, compute dtype). The
// trainer and the tasks build models the same way.
#pragma once

#include <cstdint>

#include "megatron/config/core_config.h"
#include "megatron/model.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/train/pipeline_schedule.h"

namespace megatron::train {

// The pipeline layout of `model` ([parallel] sizes over its dimensions().num_layers).
PipelineLayout model_pipeline_layout(const config::CoreConfig& core, const Model& model);

// The build info of this rank: the vocabulary and sequence length of the data, its sample fields,
// the rank's device, tensor-parallel group and pipeline stage (all chunks of it), [training] seed
// and the compute dtype of bf16/fp16.
ModelBuildInfo model_build_info(ParallelState& parallel, const config::CoreConfig& core,
                                const Model& model, std::int64_t vocab_size,
                                std::int64_t seq_length, const SampleSpec& sample_fields);

}  // namespace megatron::train
