// A split's data source, its constituents' sample requests and the blend over them.
#include "megatron/data/split_builder.h"

#include <string>
#include <vector>

#include "megatron/error.h"

namespace megatron::data {

namespace {

std::string split_text(Split split) {
  return std::string(split_name(split));
}

}  // namespace

SplitSource split_source(const BlendConfig& config, Split split) {
  SplitSource source;
  if (config.blend) {
    source.spec = &*config.blend;
    source.matrix = config.split_matrix;
  } else {
    const auto& spec = config.blend_per_split[split_slot(split)];
    source.spec = spec ? &*spec : nullptr;
    source.matrix[split_slot(split)] = SplitBookends{0.0, 1.0};
    source.per_split_blend = true;
  }
  return source;
}

bool check_split_has_data(const config::ConfigTable& table, const BlendConfig& config,
                          const SplitSource& source, Split split, std::int64_t num_samples,
                          Logger* log) {
  if (source.spec && source.matrix[split_slot(split)]) return true;
  const std::string reason = source.spec
                                 ? "zero weight in split \"" + config.split.value_or("") + "\""
                                 : "no " + per_split_key(split);
  if (split == Split::kTrain) {
    table.fail(source.spec ? "split" : per_split_key(split),
               "the train split has no data (" + reason + ") but the schedule trains on " +
                   std::to_string(num_samples) + " samples");
  }
  if (log) {
    log->warn(
        "data: the {} split has no data ({}) but the schedule asks for {} samples; it is "
        "left empty",
        split_text(split), reason, num_samples);
  }
  return false;
}

SplitBlend build_split_blend(const config::ConfigTable& table, const SplitSource& source,
                             Split split, std::int64_t num_samples, double surplus, Logger* log,
                             const ConstituentBuilder& build_constituent) {
  if (!source.spec) throw Error("the " + split_text(split) + " split has no blend to build");
  const BlendSpec& spec = *source.spec;
  SplitBlend out;
  const bool has_weights = !spec.weights.empty();
  if (!needs_blend_layer(spec.prefixes.size(), has_weights, source.per_split_blend)) {
    out.size = build_constituent(0, num_samples);
  } else {
    BlendRequest request;
    if (has_weights) request.weights = spec.weights;
    request.size = num_samples;
    request.surplus = surplus;
    const auto plan = plan_constituent_samples(request, spec.prefixes.size());
    std::vector<std::int64_t> lengths;
    for (std::size_t d = 0; d < spec.prefixes.size(); ++d)
      lengths.push_back(build_constituent(d, plan[d]));
    Blend blend;
    try {
      blend = build_blend(request, lengths);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      table.fail(spec.key, "blending the " + split_text(split) + " split: " + e.what());
    }
    out.size = static_cast<std::int64_t>(blend.indices.dataset_index.size());
    out.blend = std::move(blend.indices);
    if (log) {
      log->info("data: {} split: a blend of {} datasets, {} samples", split_text(split),
                spec.prefixes.size(), out.size);
    }
  }
  if (out.size < num_samples) {
    table.fail(spec.key, "the " + split_text(split) + " split has " + std::to_string(out.size) +
                             " samples but the schedule needs " + std::to_string(num_samples) +
                             "; a blend without weights uses each dataset once: give weights "
                             "to repeat them as needed");
  }
  return out;
}

}  // namespace megatron::data
