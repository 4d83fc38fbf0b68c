// Pipeline stage layer ranges and Megatron's 1F1B / interleaved 1F1B orders of operations.
#include "megatron/train/pipeline_schedule.h"

#include <algorithm>
#include <utility>

#include "megatron/error.h"

namespace megatron::train {

namespace {

std::string s(std::int64_t v) {
  return std::to_string(v);
}

[[noreturn]] void refuse(const std::string& what) {
  throw ConfigError("[parallel] " + what);
}

bool uneven(const PipelineLayout& l) {
  return l.first_stage_layers > 0 || l.last_stage_layers > 0;
}

// Layers per pipeline rank without interleaving.
std::vector<std::int64_t> layers_per_rank(const PipelineLayout& l) {
  const int pp = l.pipeline_size;
  if (!l.stage_layer_counts.empty()) return l.stage_layer_counts;
  if (!uneven(l)) {
    if (l.num_layers % pp != 0) {
      refuse("num_layers " + s(l.num_layers) +
             " does not divide into pipeline_model_parallel_size " + s(pp) +
             " stages; change one of them, or give decoder_first_pipeline_num_layers / "
             "decoder_last_pipeline_num_layers");
    }
    return std::vector<std::int64_t>(static_cast<std::size_t>(pp), l.num_layers / pp);
  }
  if (pp == 1) {
    refuse(
        "decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers need "
        "pipeline_model_parallel_size > 1");
  }
  if (l.first_stage_layers < 0 || l.last_stage_layers < 0) {
    refuse(
        "decoder_first_pipeline_num_layers and decoder_last_pipeline_num_layers must not be "
        "negative");
  }
  const int middle = pp - (l.first_stage_layers > 0) - (l.last_stage_layers > 0);
  const std::int64_t rest = l.num_layers - l.first_stage_layers - l.last_stage_layers;
  const std::string given = "num_layers " + s(l.num_layers) +
                            " with decoder_first_pipeline_num_layers " + s(l.first_stage_layers) +
                            " and decoder_last_pipeline_num_layers " + s(l.last_stage_layers);
  if (rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && (rest % middle != 0 || rest == 0))) {
    refuse(given + " leaves " + s(rest) + " layers for " + s(middle) +
           " middle stage(s) of pipeline_model_parallel_size " + s(pp) +
           "; every stage needs at least one layer and the middle stages an equal share");
  }
  std::vector<std::int64_t> counts(static_cast<std::size_t>(pp), middle > 0 ? rest / middle : 0);
  if (l.first_stage_layers > 0) counts.front() = l.first_stage_layers;
  if (l.last_stage_layers > 0) counts.back() = l.last_stage_layers;
  return counts;
}

void validate_layout(const PipelineLayout& l) {
  if (l.pipeline_size < 1) refuse("pipeline_model_parallel_size must be at least 1");
  if (l.virtual_size < 1) refuse("the number of virtual pipeline stages must be at least 1");
  if (l.num_layers < 1) refuse("the model has no layers to place on pipeline stages");
  if (l.virtual_size == 1) {
    layers_per_rank(l);
    return;
  }
  if (l.pipeline_size == 1) {
    refuse(
        "num_layers_per_virtual_pipeline_stage (interleaving) needs "
        "pipeline_model_parallel_size > 1");
  }
  if (uneven(l)) {
    refuse(
        "decoder_first/last_pipeline_num_layers together with interleaving "
        "(num_layers_per_virtual_pipeline_stage) is not supported; use an even split");
  }
  const std::int64_t stages = static_cast<std::int64_t>(l.pipeline_size) * l.virtual_size;
  if (l.num_layers % stages != 0) {
    refuse("num_layers " + s(l.num_layers) + " does not divide into pipeline_model_parallel_size " +
           s(l.pipeline_size) + " x " + s(l.virtual_size) +
           " virtual stages; layers per stage must be a multiple of "
           "num_layers_per_virtual_pipeline_stage");
  }
}

int group_size(const PipelineLayout& l) {
  return l.microbatch_group_size > 0 ? l.microbatch_group_size : l.pipeline_size;
}

// Megatron's get_schedule_table: micro-batches in groups of G; within a group every chunk runs
// the group's micro-batches before the next chunk; the last group may be shorter.
std::vector<std::pair<std::int64_t, int>> schedule_table(std::int64_t m, int chunks, int g) {
  std::vector<std::pair<std::int64_t, int>> table;
  for (std::int64_t start = 0; start < m; start += g) {
    const std::int64_t end = std::min<std::int64_t>(start + g, m);
    for (int c = 0; c < chunks; ++c)
      for (std::int64_t mb = start; mb < end; ++mb)
        table.emplace_back(mb, c);
  }
  return table;
}

}  // namespace

PipelineLayout pipeline_layout(const config::ParallelConfig& parallel, std::int64_t num_layers) {
  PipelineLayout l;
  l.num_layers = num_layers;
  l.pipeline_size = parallel.pipeline_model_parallel_size;
  l.first_stage_layers = parallel.decoder_first_pipeline_num_layers;
  l.last_stage_layers = parallel.decoder_last_pipeline_num_layers;
  l.microbatch_group_size = parallel.microbatch_group_size_per_vp_stage;
  if (parallel.num_layers_per_virtual_pipeline_stage) {
    const std::int64_t per = *parallel.num_layers_per_virtual_pipeline_stage;
    const std::int64_t per_stage = num_layers / l.pipeline_size;
    if (num_layers % l.pipeline_size != 0 || per_stage % per != 0) {
      refuse("num_layers_per_virtual_pipeline_stage " + s(per) + " must divide the layers of " +
             "each pipeline stage (num_layers " + s(num_layers) +
             " / pipeline_model_parallel_size " + s(l.pipeline_size) + ")");
    }
    l.virtual_size = static_cast<int>(per_stage / per);
  }
  return l;
}

PipelineLayout pipeline_layout(const config::ParallelConfig& parallel,
                               const ModelDimensions& dims) {
  PipelineLayout l = pipeline_layout(parallel, dims.num_layers);
  const std::vector<std::int64_t>& counts = dims.stage_layer_counts;
  if (counts.empty()) return l;
  std::int64_t total = 0;
  for (std::int64_t c : counts)
    total += c;
  const std::string split = "the model's pipeline stage boundaries (`|` in hybrid_layer_pattern)";
  if (static_cast<int>(counts.size()) != l.pipeline_size) {
    refuse("pipeline_model_parallel_size " + s(l.pipeline_size) + " does not match " + split +
           ", which give " + s(static_cast<std::int64_t>(counts.size())) + " stage(s)");
  }
  if (total != dims.num_layers ||
      std::any_of(counts.begin(), counts.end(), [](std::int64_t c) { return c < 1; })) {
    refuse(split + " must give every stage at least one layer");
  }
  if (l.virtual_size > 1 || uneven(l)) {
    refuse(split +
           " fix each stage's layers; num_layers_per_virtual_pipeline_stage and "
           "decoder_first/last_pipeline_num_layers cannot be used with them");
  }
  l.stage_layer_counts = counts;
  return l;
}

LayerRange stage_layers(const PipelineLayout& layout, int rank, int chunk) {
  validate_layout(layout);
  if (rank < 0 || rank >= layout.pipeline_size || chunk < 0 || chunk >= layout.virtual_size) {
    throw Error("stage_layers: rank " + s(rank) + " chunk " + s(chunk) + " outside a pipeline of " +
                s(layout.pipeline_size) + " x " + s(layout.virtual_size));
  }
  if (layout.virtual_size > 1) {
    const std::int64_t per = layout.num_layers / (layout.pipeline_size * layout.virtual_size);
    return {(static_cast<std::int64_t>(chunk) * layout.pipeline_size + rank) * per, per};
  }
  const std::vector<std::int64_t> counts = layers_per_rank(layout);
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r)
    first += counts[static_cast<std::size_t>(r)];
  return {first, counts[static_cast<std::size_t>(rank)]};
}

void validate_pipeline(const PipelineLayout& layout, std::int64_t m) {
  validate_layout(layout);
  if (m < 1) refuse("a training step needs at least one micro-batch, got " + s(m));
  if (layout.virtual_size == 1) return;
  const int g = group_size(layout), pp = layout.pipeline_size;
  if (g < pp || g > m) {
    refuse("the interleaved schedule runs micro-batches in groups of " + s(g) +
           (layout.microbatch_group_size > 0 ? " (microbatch_group_size_per_vp_stage)"
                                             : " (= pipeline_model_parallel_size)") +
           ", which must lie in [pipeline_model_parallel_size " + s(pp) + ", micro-batches " +
           s(m) +
           "]; raise global_batch_size / (micro_batch_size x data-parallel size) to at least " +
           s(std::max(g, pp)));
  }
  if (m % g != 0 && m % g < pp) {
    refuse(s(m) + " micro-batches leave a last group of " + s(m % g) + " for the interleaved " +
           "schedule (groups of " + s(g) + "); it must be empty or at least " +
           "pipeline_model_parallel_size " + s(pp) + ": use a multiple of " + s(g) +
           " micro-batches");
  }
}

std::vector<PipelineAction> pipeline_schedule(const PipelineLayout& layout, int rank,
                                              std::int64_t m) {
  validate_pipeline(layout, m);
  const int pp = layout.pipeline_size;
  if (rank < 0 || rank >= pp) {
    throw Error("pipeline_schedule: rank " + s(rank) + " outside a pipeline of " + s(pp));
  }
  std::vector<PipelineAction> out;
  if (layout.virtual_size == 1) {
    const std::int64_t warmup = std::min<std::int64_t>(pp - rank - 1, m);
    const std::int64_t remaining = m - warmup;
    for (std::int64_t i = 0; i < warmup; ++i)
      out.push_back({PipelineOp::forward, i, 0});
    for (std::int64_t i = 0; i < remaining; ++i) {
      out.push_back({PipelineOp::forward, warmup + i, 0});
      out.push_back({PipelineOp::backward, i, 0});
    }
    for (std::int64_t i = 0; i < warmup; ++i)
      out.push_back({PipelineOp::backward, remaining + i, 0});
    return out;
  }
  const int chunks = layout.virtual_size;
  const auto table = schedule_table(m, chunks, group_size(layout));
  const auto total = static_cast<std::int64_t>(table.size());
  const std::int64_t warmup =
      std::min<std::int64_t>(static_cast<std::int64_t>(pp - rank - 1) * 2 +
                                 static_cast<std::int64_t>(chunks - 1) * group_size(layout),
                             total);
  const std::int64_t remaining = total - warmup;
  auto forward = [&](std::int64_t k) {
    const auto& [mb, c] = table[static_cast<std::size_t>(k)];
    out.push_back({PipelineOp::forward, mb, c});
  };
  // Backward k runs the chunks in reverse order over the same micro-batches (Megatron's
  // get_model_chunk_id(k, forward=False)).
  auto backward = [&](std::int64_t k) {
    const auto& [mb, c] = table[static_cast<std::size_t>(k)];
    out.push_back({PipelineOp::backward, mb, chunks - 1 - c});
  };
  for (std::int64_t k = 0; k < warmup; ++k)
    forward(k);
  for (std::int64_t k = 0; k < remaining; ++k) {
    forward(warmup + k);
    backward(k);
  }
  for (std::int64_t k = remaining; k < total; ++k)
    backward(k);
  return out;
}

std::vector<PipelineAction> pipeline_forward_schedule(const PipelineLayout& layout, int rank,
                                                      std::int64_t m) {
  validate_pipeline(layout, m);
  if (rank < 0 || rank >= layout.pipeline_size) {
    throw Error("pipeline_forward_schedule: rank " + s(rank) + " outside a pipeline of " +
                s(layout.pipeline_size));
  }
  std::vector<PipelineAction> out;
  for (const auto& [mb, c] : schedule_table(m, layout.virtual_size, group_size(layout)))
    out.push_back({PipelineOp::forward, mb, c});
  return out;
}

std::string to_string(const PipelineAction& a) {
  return (a.op == PipelineOp::forward ? "F" : "B") + s(a.micro_batch) + "." + s(a.chunk);
}

}  // namespace megatron::train
