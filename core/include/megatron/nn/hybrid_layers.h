// Which kind each layer of a hybrid stack is: Megatron's allocate_layers (the ratio rule and the
// override pattern, mamba_hybrid_layer_allocation.py) and `|` pipeline-stage boundaries.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megatron::nn {

// One character per layer: 'M' Mamba, '*' attention, '-' MLP, 'E' Mixture of Experts.
struct HybridLayers {
  std::string kinds;
  // Layers per pipeline stage from `|` boundaries in the pattern; empty without any.
  std::vector<std::int64_t> stage_layers;
};

// Megatron's _allocate_auto: attention layers spread evenly between Mamba sections, then MLP
// layers spread over the remaining Mamba layers, both by its rounding rule.
std::string allocate_by_ratio(std::int64_t layers, double attention_ratio, double mlp_ratio);

// The layer kinds from the [model] keys: `pattern` (hybrid_layer_pattern) when given, else the
// ratios. Throws ConfigError naming the key: a character other than M * - E |, a length (without
// `|`) other than num_layers, an empty stage, ratios out of [0, 1] or summing above 1, or a
// pattern whose counts differ from what non-zero ratios allocate (Megatron's rule).
HybridLayers allocate_layers(std::int64_t layers, double attention_ratio, double mlp_ratio,
                             const std::optional<std::string>& pattern);

}  // namespace megatron::nn
