// Per-rank parameter counts and memory estimates from declared parameters.
#include "megatron/train/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "megatron/error.h"

namespace megatron::train {

namespace {

// The stage of a parameter, or -1 for "first and (tied copy) last" word embeddings.
std::int64_t stage_of(const std::string& name, std::int64_t layers_per_stage, std::int64_t stages) {
  const std::string layer_prefix = "decoder.layers.";
  if (name.rfind(layer_prefix, 0) == 0) {
    const std::int64_t layer = std::stoll(name.substr(layer_prefix.size()));
    return layer / layers_per_stage;
  }
  if (name.rfind("embedding.", 0) == 0) return 0;
  return stages - 1;
}

std::int64_t local_numel(const Parameter& p, std::int64_t tp) {
  std::int64_t n = shape_numel(p.global_shape);
  if (p.partition_dim >= 0) n /= tp;
  return n;
}

}  // namespace

MemoryPlan plan_memory(const ParameterSet& params, const ModelDimensions& d,
                       const PlanLayout& layout, bool tied_embeddings) {
  const std::int64_t pp = layout.pipeline, tp = layout.tensor;
  if (d.num_layers % pp != 0) {
    throw ConfigError("num_layers " + std::to_string(d.num_layers) +
                      " is not divisible by pipeline_model_parallel_size " + std::to_string(pp));
  }
  MemoryPlan plan;
  const std::int64_t per_stage = d.num_layers / pp;
  for (std::int64_t s = 0; s < pp; ++s)
    plan.stages.push_back({s, per_stage, 0});
  for (const auto& p : params) {
    plan.total_parameters += shape_numel(p->global_shape);
    const std::int64_t n = local_numel(*p, tp);
    plan.stages[static_cast<std::size_t>(stage_of(p->name, per_stage, pp))].parameters += n;
    if (tied_embeddings && pp > 1 && p->name == "embedding.word_embeddings.weight")
      plan.stages.back().parameters += n;
  }
  for (const auto& s : plan.stages)
    plan.max_rank_parameters = std::max(plan.max_rank_parameters, s.parameters);

  // Megatron's table (docs, distributed optimizer): param + grad + fp32 master + Adam moments.
  const double dp = static_cast<double>(layout.data);
  switch (layout.precision) {
    case Precision::fp32:
      plan.bytes_per_parameter = 16, plan.bytes_per_parameter_distributed = 8 + 8 / dp;
      break;
    case Precision::bf16:
      plan.bytes_per_parameter = 18, plan.bytes_per_parameter_distributed = 6 + 12 / dp;
      break;
    case Precision::fp16:
      plan.bytes_per_parameter = 20, plan.bytes_per_parameter_distributed = 4 + 16 / dp;
      break;
  }

  // Korthikanti et al. (2022) Table 2, per layer, 16-bit activations, tensor + sequence parallel:
  // sbh(34 + 5as/h)/t without recomputation, 34sbh/t (for ffn = 4h; 18 + 4 ffn/h in general,
  // as Megatron writes it) with selective recomputation, 2sbh/t per layer input with full
  // recomputation plus one layer's working set. The first stage holds `pp` micro-batches in
  // flight under 1F1B, i.e. L layers' worth in total (Megatron's theoretical_memory_usage).
  const double s = static_cast<double>(d.seq_length),
               b = static_cast<double>(layout.micro_batch_size);
  const double h = static_cast<double>(d.hidden_size),
               a = static_cast<double>(d.num_attention_heads);
  const double ffn_ratio = static_cast<double>(d.ffn_hidden_size) / h;
  const double layers = static_cast<double>(d.num_layers);
  const double sbh = s * b * h;
  const double selective_layer = sbh * (18 + 4 * ffn_ratio);
  const double full_layer = selective_layer + 5 * a * s * s * b;
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
