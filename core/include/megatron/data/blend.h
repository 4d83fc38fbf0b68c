// Megatron's blending of several datasets into one (`data_path = [0.3, "a", 0.7, "b"]`): weight
// normalisation, the samples each constituent is asked for, and the greedy minimum-error order.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace megatron::data {

// Megatron's default `mid_level_dataset_surplus`: constituents are built this much larger than
// their share so the blend never runs out.
inline constexpr double kDefaultMidLevelSurplus = 0.005;

// w / sum(w) with numpy's float64 summation order (pairwise, 8 accumulators), so the result
// equals Megatron's utils.normalize to the last bit. Throws megatron::Error on an empty list, a
// negative weight or a zero sum.
std::vector<double> normalize_weights(std::span<const double> weights);

// Samples requested of each constituent: ceil(ceil(size * w) * (1 + surplus)).
std::vector<std::int64_t> constituent_sample_requests(std::span<const double> normalized_weights,
                                                      std::int64_t size,
                                                      double surplus = kDefaultMidLevelSurplus);

// Which dataset each blended sample comes from (int16) and which of that dataset's samples it is.
struct BlendIndices {
  std::vector<std::int16_t> dataset_index;
  std::vector<std::int64_t> dataset_sample_index;
};

// Greedy minimum error: sample t comes from the dataset maximising w_d * max(t, 1) - count_d,
// the lowest index winning ties.
BlendIndices build_blending_indices(std::span<const double> normalized_weights, std::int64_t size);

// Every dataset contributes exactly sizes[d] samples, interleaved by the same greedy rule over the
// datasets not yet exhausted, with weights sizes[d] / sum(sizes).
BlendIndices build_exhaustive_blending_indices(std::span<const std::int64_t> sizes);

// A blend as the user gives it: weights per dataset (nullopt: weigh by the constituents' lengths)
// and the requested size (nullopt: exhaustive, every constituent used exactly once).
struct BlendRequest {
  std::optional<std::vector<double>> weights;
  std::optional<std::int64_t> size;
  double surplus = kDefaultMidLevelSurplus;
};

// Whether Megatron builds a blend layer at all: not for a single dataset given without a weight
// (or, for per-split blends, for any single dataset).
bool needs_blend_layer(std::size_t num_datasets, bool has_weights, bool per_split_blend);

// Step one: the sample count to build each constituent with, nullopt meaning one epoch without
// excess. Weights require a size (throws megatron::Error otherwise).
std::vector<std::optional<std::int64_t>> plan_constituent_samples(const BlendRequest& request,
                                                                  std::size_t num_datasets);

// Step two, once the constituents are built: the blend over their lengths.
struct Blend {
  BlendIndices indices;
  // The weights the blend was built with: normalised, or the constituent lengths when exhaustive.
  std::vector<double> weights;
  bool weights_are_lengths = false;  // exhaustive: Megatron records them as integers
  std::optional<std::int64_t> size;  // nullopt for an exhaustive blend
};
// Throws megatron::Error when a weight or a constituent length is not positive, or when the blend
// would draw more samples from a constituent than it has (raise the surplus then).
Blend build_blend(const BlendRequest& request, std::span<const std::int64_t> constituent_lengths);

}  // namespace megatron::data
