// One split built as Megatron's BlendedMegatronDatasetBuilder builds it, for any mid-level dataset
// class: which blend and split book-ends it reads, how many samples each constituent is asked
// for, and the blend over them. The dataset plugin builds the constituents (GPTDataset,
// BERTMaskedWordPieceDataset, ...) through a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "megatron/config/table.h"
#include "megatron/data/blend.h"
#include "megatron/data/blend_config.h"
#include "megatron/data/split.h"
#include "megatron/log.h"

namespace megatron::data {

// The data of one split: data_path with the split matrix of `split`, or the split's own blend,
// which reads its datasets whole ([0, 1] for this split only).
struct SplitSource {
  const BlendSpec* spec = nullptr;  // nullptr: no per-split path names this split
  SplitMatrix matrix{};
  bool per_split_blend = false;
};
// `config` must outlive the result (it points into it).
SplitSource split_source(const BlendConfig& config, Split split);

// Whether the split has data: a blend names it and `split` gives it a non-zero share. Megatron
// builds nothing for a split without data and skips its evaluation, so when it has none the
// valid and test splits are left empty with a warning on `log` (when given); the train split
// cannot do without it: ConfigError naming `split` or the per-split key.
bool check_split_has_data(const config::ConfigTable& table, const BlendConfig& config,
                          const SplitSource& source, Split split, std::int64_t num_samples,
                          Logger* log);

// Builds constituent `index` (it reads source.spec->prefixes[index]) asked for `num_samples`
// samples (nullopt: one epoch, no excess) and returns its length.
using ConstituentBuilder =
    std::function<std::int64_t(std::size_t index, std::optional<std::int64_t> num_samples)>;

// What the split serves: its single constituent (no blend), or the blend over its constituents.
struct SplitBlend {
  std::optional<BlendIndices> blend;
  std::int64_t size = 0;
};

// Builds a split that has data: a dataset Megatron adds no blend layer to (one dataset given
// without a weight, or the one dataset of a per-split blend) is served as it is, asked for
// num_samples; otherwise every constituent is built (weights: ceil(ceil(N w) (1 + surplus))
// samples; none: one epoch) and blended (weights: greedy order over sum ceil(N w) samples; none:
// weighed by the constituents' lengths, min(N, their sum) samples). Logs the blend on `log` (when
// given). Throws ConfigError naming source.spec->key when the blend cannot be built or the split
// has fewer than num_samples samples (an unweighted blend uses each dataset once).
SplitBlend build_split_blend(const config::ConfigTable& table, const SplitSource& source,
                             Split split, std::int64_t num_samples, double surplus, Logger* log,
                             const ConstituentBuilder& build_constituent);

}  // namespace megatron::data
