// Hybrid layer allocation as Megatron-core's mamba_hybrid_layer_allocation.py does it (core, as
// in Megatron-core: any hybrid model's layer pattern, not only the mamba plugin's).
#include "megatron/nn/hybrid_layers.h"

#include <algorithm>
#include <cmath>

#include "megatron/error.h"

namespace megatron::nn {

namespace {

constexpr char kMamba = 'M', kAttention = '*', kMlp = '-', kMoe = 'E', kStage = '|';

// Python's round(): halves to even.
std::int64_t round_half_even(double v) {
  return static_cast<std::int64_t>(std::nearbyint(v));
}

std::int64_t count(const std::string& s, char c) {
  return static_cast<std::int64_t>(std::count(s.begin(), s.end(), c));
}

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw ConfigError("[model] " + key + ": " + why);
}

}  // namespace

std::string allocate_by_ratio(std::int64_t layers, double attention_ratio, double mlp_ratio) {
  const std::int64_t attention = round_half_even(static_cast<double>(layers) * attention_ratio);
  std::int64_t mamba = layers - attention;
  const double section = static_cast<double>(mamba) / static_cast<double>(attention + 1);
  std::string kinds(static_cast<std::size_t>(layers), kMamba);
  double x = section;
  for (char& k : kinds) {
    if (x < 0.5) {
      k = kAttention;
      x += section;
    } else {
      x -= 1;
    }
  }
  const std::int64_t mlp = round_half_even(static_cast<double>(layers) * mlp_ratio);
  if (mlp > 0) {
    mamba -= mlp;
    const double per_mlp = static_cast<double>(mamba) / static_cast<double>(mlp);
    x = per_mlp;
    for (char& k : kinds) {
      if (k != kMamba) continue;
      if (x < 0.5) {
        k = kMlp;
        x += per_mlp;
      } else {
        x -= 1;
      }
    }
  }
  return kinds;
}

HybridLayers allocate_layers(std::int64_t layers, double attention_ratio, double mlp_ratio,
                             const std::optional<std::string>& pattern) {
  if (attention_ratio < 0 || attention_ratio > 1 || mlp_ratio < 0 || mlp_ratio > 1 ||
      attention_ratio + mlp_ratio > 1) {
    refuse("hybrid_attention_ratio", "hybrid_attention_ratio (" + std::to_string(attention_ratio) +
                                         ") and hybrid_mlp_ratio (" + std::to_string(mlp_ratio) +
                                         ") must each lie in [0, 1] and sum to at most 1");
  }
  HybridLayers out;
  const std::string by_ratio = allocate_by_ratio(layers, attention_ratio, mlp_ratio);
  if (!pattern) {
    out.kinds = by_ratio;
    return out;
  }
  const std::string& p = *pattern;
  std::int64_t stage = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == kStage) {
      if (stage == 0) {
        refuse("hybrid_layer_pattern", "'|' at position " + std::to_string(i + 1) +
                                           " ends a pipeline stage without layers");
      }
      out.stage_layers.push_back(stage);
      stage = 0;
      continue;
    }
    if (c != kMamba && c != kAttention && c != kMlp && c != kMoe) {
      refuse("hybrid_layer_pattern", "'" + std::string(1, c) + "' at position " +
                                         std::to_string(i + 1) +
                                         " is not a layer kind (M Mamba, * attention, - MLP, E "
                                         "MoE, | pipeline-stage boundary)");
    }
    out.kinds.push_back(c);
    ++stage;
  }
  if (!out.stage_layers.empty()) {
    if (stage == 0) refuse("hybrid_layer_pattern", "the last pipeline stage has no layers");
    out.stage_layers.push_back(stage);
  }
  const auto length = static_cast<std::int64_t>(out.kinds.size());
  if (length != layers) {
    refuse("hybrid_layer_pattern", "the pattern has " + std::to_string(length) +
                                       " layers but num_layers is " + std::to_string(layers));
  }
  if ((attention_ratio > 0 || mlp_ratio > 0) &&
      (count(out.kinds, kAttention) != count(by_ratio, kAttention) ||
       count(out.kinds, kMlp) != count(by_ratio, kMlp))) {
    refuse("hybrid_layer_pattern",
           "the pattern's layer counts differ from what hybrid_attention_ratio and "
           "hybrid_mlp_ratio allocate (" +
               by_ratio + "); Megatron requires them to match (or set both ratios to 0)");
  }
  return out;
}

}  // namespace megatron::nn
