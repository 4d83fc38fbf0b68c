// What `megatron-app plan` reports: parameters per pipeline stage and tensor-parallel rank, memory
// for weights, gradients and optimizer state (Megatron's bytes-per-parameter table, with and
// without the distributed optimizer), activation memory per micro-batch (Korthikanti et al.'s
// formulas, as Megatron's theoretical_memory_usage), computed from the declared parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megatron/model.h"
#include "megatron/nn/parameter.h"

namespace megatron::train {

enum class Precision { fp32, bf16, fp16 };

struct PlanLayout {
  std::int64_t tensor = 1, pipeline = 1, data = 1;
  // Context parallelism: each rank holds seq / context tokens of every sequence (its activations
  // shrink by that factor) and the distributed optimizer shards over data x context ranks.
  std::int64_t context = 1;
  // Expert parallelism: expert tensors (Parameter::experts) split over `expert` ranks, their
  // optimizer state over the expert-data-parallel ranks, data / expert.
  std::int64_t expert = 1;
  std::int64_t micro_batch_size = 1;
  std::int64_t num_micro_batches = 1;
  Precision precision = Precision::fp32;
  // [ddp]: how the distributed optimizer would partition the gradient buffer (the training code's
  // layout_buffer, so the shard sizes, padding included, are the ones training allocates).
  bool overlap_grad_reduce = false;
  std::optional<std::int64_t> bucket_size;  // nullopt: Megatron's default
};

struct StagePlan {
  std::int64_t stage = 0;
  std::int64_t layers = 0;      // transformer layers on the stage
  std::int64_t parameters = 0;  // on one tensor-parallel rank of the stage
};

struct MemoryPlan {
  std::int64_t total_parameters = 0;  // unsplit, embeddings counted once
  // What one token uses: total_parameters less the experts it is not routed to (MoE).
  std::int64_t active_parameters = 0;
  std::vector<StagePlan> stages;
  std::int64_t max_rank_parameters = 0;
  double bytes_per_parameter = 0;              // without the distributed optimizer
  double bytes_per_parameter_distributed = 0;  // with it, over `data` ranks (padding included)
  // Largest stage with the distributed optimizer: gradient-buffer elements (padded) and the most
  // elements any data-parallel rank's optimizer owns.
  std::int64_t distributed_buffer_elements = 0;
  std::int64_t max_optimizer_shard_elements = 0;
  std::int64_t gradient_buckets = 0;
  // Activation bytes of the first stage per micro-batch schedule, 16-bit activations.
  double activations_no_recompute = 0;
  double activations_selective = 0;
  double activations_full = 0;
};

// One pipeline stage as the model declares it when built for that stage (on the meta device):
// its parameters (one tensor-parallel rank's shards are derived from them) and its layer count.
struct StageParameters {
  const ParameterSet* params = nullptr;
  std::int64_t layers = 0;
};

// `stages` in pipeline order. A parameter held by several stages (a tied word embedding's copy on
// the last stage, shared_across_pipeline()) counts once in total_parameters and on every
// stage that holds it.
MemoryPlan plan_memory(const std::vector<StageParameters>& stages, const ModelDimensions& dims,
                       const PlanLayout& layout);

// "1.23 GiB", "512.0 MiB".
std::string format_bytes(double bytes);

}  // namespace megatron::train
