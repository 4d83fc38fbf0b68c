// Pipeline parallelism as data: which layers each stage (and virtual stage) holds, and the order
// in which a pipeline rank runs forward and backward passes of its micro-batches (Megatron's 1F1B
// and interleaved 1F1B schedules).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megatron/config/core_config.h"
#include "megatron/model.h"  // LayerRange

namespace megatron::train {

// How the layers are cut into pipeline stages ([parallel] keys, Megatron's argument names).
struct PipelineLayout {
  std::int64_t num_layers = 0;
  int pipeline_size = 1;                // pipeline_model_parallel_size
  int virtual_size = 1;                 // model chunks per rank (1: no interleaving)
  std::int64_t first_stage_layers = 0;  // decoder_first_pipeline_num_layers (0: even split)
  std::int64_t last_stage_layers = 0;   // decoder_last_pipeline_num_layers (0: even split)
  int microbatch_group_size = 0;        // interleaved only; 0: pipeline_size (Megatron)
  // Layers of each stage as the model fixes them (ModelDimensions::stage_layer_counts); empty:
  // the even or first/last split above.
  std::vector<std::int64_t> stage_layer_counts = {};
};

// The layout the [parallel] table describes for a model of `num_layers` layers
// (num_layers_per_virtual_pipeline_stage gives the chunks per rank). Throws ConfigError when the
// virtual stage size does not divide a stage's layers.
PipelineLayout pipeline_layout(const config::ParallelConfig& parallel, std::int64_t num_layers);
// The layout for a model's dimensions: as above, with the model's own stage split when it gives
// one (refused, naming the keys, when its stage count is not pipeline_model_parallel_size or
// interleaving or first/last stage sizes are also asked for).
PipelineLayout pipeline_layout(const config::ParallelConfig& parallel, const ModelDimensions& dims);

// Layers of model chunk `chunk` on pipeline rank `rank`. Even split: chunk c on rank r holds
// layers from (c * pipeline_size + r) * L / (pipeline_size * virtual_size). Uneven first/last
// stages (without interleaving): the first and last stage hold the given counts, the middle
// stages split the rest evenly. Throws ConfigError (naming the [parallel] key and the numbers)
// when the layout does not divide.
LayerRange stage_layers(const PipelineLayout& layout, int rank, int chunk = 0);

// Checks the layout against Megatron's constraints, including the micro-batch count for the
// interleaved schedule; throws ConfigError explaining what to change.
void validate_pipeline(const PipelineLayout& layout, std::int64_t num_micro_batches);

enum class PipelineOp : std::uint8_t { forward, backward };

// One step of a rank's schedule: run `op` of micro-batch `micro_batch` through model chunk
// `chunk` (always 0 without interleaving).
struct PipelineAction {
  PipelineOp op = PipelineOp::forward;
  std::int64_t micro_batch = 0;
  int chunk = 0;

  bool operator==(const PipelineAction&) const = default;
};

// The order of one training step on pipeline rank `rank` (Megatron's
// forward_backward_pipelining_without_interleaving / _with_interleaving): warm-up forwards,
// steady one-forward-one-backward, cool-down backwards. With pipeline_size 1 it is
// forward/backward per micro-batch. Validates the layout first.
std::vector<PipelineAction> pipeline_schedule(const PipelineLayout& layout, int rank,
                                              std::int64_t num_micro_batches);

// Forward-only order (evaluation): every micro-batch through every chunk, in schedule order.
std::vector<PipelineAction> pipeline_forward_schedule(const PipelineLayout& layout, int rank,
                                                      std::int64_t num_micro_batches);

// "F3.1" / "B0.0" (micro-batch.chunk), for messages and tests.
std::string to_string(const PipelineAction& action);

}  // namespace megatron::train
