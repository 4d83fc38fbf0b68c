// Per-rank parameter counts and memory estimates from declared parameters.
#include "megatron/train/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "megatron/error.h"
#include "megatron/train/grad_buffer.h"
#include "megatron/train/pipeline_schedule.h"

namespace megatron::train {

namespace {

std::int64_t local_numel(const Parameter& p, std::int64_t tp, std::int64_t ep) {
  std::int64_t n = shape_numel(p.global_shape);
  if (p.experts > 0) return n / ep;  // whole experts per rank (no expert tensor parallelism yet)
  if (p.partition_dim >= 0) n /= tp;
  return n;
}

// The largest shard one data-parallel rank owns of a buffer of `numels` cut as training cuts it.
std::int64_t largest_shard(const std::vector<std::int64_t>& numels, const std::vector<bool>& shared,
                           std::int64_t ranks, const PlanLayout& layout, BufferLayout* out) {
  BufferOptions options;
  options.data_parallel_size = static_cast<int>(ranks);
  options.distributed_optimizer = true;
  if (layout.overlap_grad_reduce)
    options.bucket_size =
        layout.bucket_size.value_or(default_bucket_size(options.data_parallel_size));
  options.separate_bucket = shared;
  const BufferLayout buffer = layout_buffer(numels, options);
  std::int64_t most = 0;
  for (int r = 0; r < options.data_parallel_size; ++r)
    most = std::max(most, buffer.owned_elements(r));
  if (out) *out = buffer;
  return most;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<StageParameters>& stage_params, const ModelDimensions& d,
                       const PlanLayout& layout) {
  const std::int64_t pp = layout.pipeline, tp = layout.tensor;
  if (static_cast<std::int64_t>(stage_params.size()) != pp) {
    throw Error("plan_memory: " + std::to_string(stage_params.size()) +
                " stages for pipeline size " + std::to_string(pp));
  }
  MemoryPlan plan;
  std::vector<std::vector<std::int64_t>> stage_numels(static_cast<std::size_t>(pp));
  std::vector<std::vector<bool>> stage_shared(static_cast<std::size_t>(pp));  // tied copies
  std::vector<std::vector<std::int64_t>> stage_expert_numels(static_cast<std::size_t>(pp));
  std::set<std::string> counted;
  for (std::int64_t s = 0; s < pp; ++s) {
    const StageParameters& stage = stage_params[static_cast<std::size_t>(s)];
    plan.stages.push_back({s, stage.layers, 0});
    for (const auto& p : *stage.params) {
      if (counted.insert(p->name).second) {
        const std::int64_t n = shape_numel(p->global_shape);
        plan.total_parameters += n;
        plan.active_parameters += p->experts > 0 ? n / p->experts * p->experts_per_token : n;
      }
      if (p->experts > 0 && p->experts % layout.expert != 0) {
        throw ConfigError("[parallel] expert_model_parallel_size " + std::to_string(layout.expert) +
                          " must divide num_experts (" + std::to_string(p->experts) + " in " +
                          p->name + ")");
      }
      const std::int64_t n = local_numel(*p, tp, layout.expert);
      plan.stages.back().parameters += n;
      if (p->experts > 0) {
        stage_expert_numels[static_cast<std::size_t>(s)].push_back(n);
        continue;
      }
      stage_numels[static_cast<std::size_t>(s)].push_back(n);
      stage_shared[static_cast<std::size_t>(s)].push_back(p->shared_across_pipeline());
    }
  }
  std::size_t largest = 0;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    if (plan.stages[s].parameters > plan.stages[largest].parameters) largest = s;
  }
  plan.max_rank_parameters = plan.stages[largest].parameters;

  // Megatron's table (docs, distributed optimizer): param + grad + fp32 master + Adam moments.
  // Bytes every rank keeps per parameter, and bytes only the owning rank keeps.
  double kept = 0, sharded = 0;
  switch (layout.precision) {
    case Precision::fp32:
      kept = 8, sharded = 8;
      break;
    case Precision::bf16:
      kept = 6, sharded = 12;
      break;
    case Precision::fp16:
      kept = 4, sharded = 16;
      break;
  }
  plan.bytes_per_parameter = kept + sharded;
  // The distributed optimizer's shards as training cuts them (buckets padded to lcm(dp, 128));
  // expert tensors form a buffer of their own over the expert-data-parallel ranks, as Megatron's.
  BufferLayout buffer;
  plan.max_optimizer_shard_elements = largest_shard(stage_numels[largest], stage_shared[largest],
                                                    layout.data * layout.context, layout, &buffer);
  plan.distributed_buffer_elements = buffer.numel;
  plan.gradient_buckets = static_cast<std::int64_t>(buffer.buckets.size());
  const std::vector<std::int64_t>& experts = stage_expert_numels[largest];
  if (!experts.empty()) {
    BufferLayout expert_buffer;
    plan.max_optimizer_shard_elements +=
        largest_shard(experts, std::vector<bool>(experts.size(), false),
                      std::max<std::int64_t>(layout.data * layout.context / layout.expert, 1),
                      layout, &expert_buffer);
    plan.distributed_buffer_elements += expert_buffer.numel;
    plan.gradient_buckets += static_cast<std::int64_t>(expert_buffer.buckets.size());
  }
  const double n = static_cast<double>(std::max<std::int64_t>(plan.max_rank_parameters, 1));
  plan.bytes_per_parameter_distributed =
      kept + sharded * static_cast<double>(plan.max_optimizer_shard_elements) / n;

  // Korthikanti et al. (2022) Table 2, per layer, 16-bit activations, tensor + sequence parallel:
  // sbh(34 + 5as/h)/t without recomputation, 34sbh/t (for ffn = 4h; 18 + 4 ffn/h in general,
  // as Megatron writes it) with selective recomputation, 2sbh/t per layer input with full
  // recomputation plus one layer's working set. The first stage holds `pp` micro-batches in
  // flight under 1F1B, i.e. L layers' worth in total (Megatron's theoretical_memory_usage).
  // Context parallelism: each rank's tokens are s / cp (its queries see all s keys in the score
  // term).
  const double s_all = static_cast<double>(d.seq_length);
  const double s = s_all / static_cast<double>(layout.context),
               b = static_cast<double>(layout.micro_batch_size);
  const double h = static_cast<double>(d.hidden_size),
               a = static_cast<double>(d.num_attention_heads);
  const double ffn_ratio = static_cast<double>(d.ffn_hidden_size) / h;
  const double layers = static_cast<double>(d.num_layers);
  const double sbh = s * b * h;
  const double selective_layer = sbh * (18 + 4 * ffn_ratio);
  const double full_layer = selective_layer + 5 * a * s * s_all * b;
  double in_flight = 1.0;
  if (pp > 1) {
    in_flight =
        std::min(1.0, static_cast<double>(layout.num_micro_batches) / static_cast<double>(pp));
  }
  // Embedding input (8 bytes per token) and embedding dropout mask per micro-batch in flight.
  const double embedding = (8 * s * b + sbh) * static_cast<double>(pp);
  // Output layer and cross-entropy inputs when one stage holds everything.
  const double head = pp == 1 ? sbh * 4 * (1 + static_cast<double>(d.padded_vocab_size) / h) : 0.0;
  auto total = [&](double per_layer_stack) {
    return ((per_layer_stack + embedding) * in_flight + head) / static_cast<double>(tp);
  };
  plan.activations_no_recompute = total(full_layer * layers);
  plan.activations_selective = total(selective_layer * layers);
  plan.activations_full = total(2 * sbh * layers + full_layer);
  return plan;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}

}  // namespace megatron::train
