// Blend weights, constituent sizes and the greedy minimum-error blending order.
#include "megatron/data/blend.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "megatron/error.h"

namespace megatron::data {

namespace {

// numpy's pairwise_sum for float64: below 8 elements a plain loop, up to 128 eight interleaved
// accumulators combined as a tree, beyond that a split at a multiple of 8 below the middle.
double numpy_pairwise_sum(std::span<const double> a) {
  const std::size_t n = a.size();
  if (n < 8) {
    double sum = 0.0;
    for (double x : a)
      sum += x;
    return sum;
  }
  if (n <= 128) {
    double r[8];
    for (std::size_t j = 0; j < 8; ++j)
      r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - n % 8; i += 8) {
      for (std::size_t j = 0; j < 8; ++j)
        r[j] += a[i + j];
    }
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i)
      sum += a[i];
    return sum;
  }
  std::size_t half = n / 2;
  half -= half % 8;
  return numpy_pairwise_sum(a.first(half)) + numpy_pairwise_sum(a.subspan(half));
}

std::string dataset_label(std::size_t index) {
  return "dataset " + std::to_string(index);
}

void check_counts_fit(const BlendIndices& indices, std::span<const std::int64_t> lengths) {
  std::vector<std::int64_t> drawn(lengths.size(), 0);
  for (std::int16_t d : indices.dataset_index)
    ++drawn[static_cast<std::size_t>(d)];
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    if (drawn[d] > lengths[d]) {
      throw Error("the blend draws " + std::to_string(drawn[d]) + " samples from " +
                  dataset_label(d) + ", which has only " + std::to_string(lengths[d]) +
                  "; raise the mid-level dataset surplus");
    }
  }
}

}  // namespace

std::vector<double> normalize_weights(std::span<const double> weights) {
  if (weights.empty()) throw Error("cannot normalise an empty list of weights");
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] >= 0.0) || !std::isfinite(weights[i])) {
      throw Error("weight " + std::to_string(i) + " is " + std::to_string(weights[i]) +
                  "; weights must be finite and non-negative");
    }
  }
  // numpy's add.reduce starts from the identity 0.0 and adds the pairwise sum of all elements.
  const double sum = 0.0 + numpy_pairwise_sum(weights);
  if (sum == 0.0) throw Error("cannot normalise weights that sum to zero");
  std::vector<double> normalized(weights.size());
  for (std::size_t i = 0; i < weights.size(); ++i)
    normalized[i] = weights[i] / sum;
  return normalized;
}

std::vector<std::int64_t> constituent_sample_requests(std::span<const double> normalized_weights,
                                                      std::int64_t size, double surplus) {
  std::vector<std::int64_t> requests;
  requests.reserve(normalized_weights.size());
  for (double weight : normalized_weights) {
    const double share = std::ceil(static_cast<double>(size) * weight);
    requests.push_back(static_cast<std::int64_t>(std::ceil(share * (1.0 + surplus))));
  }
  return requests;
}

BlendIndices build_blending_indices(std::span<const double> normalized_weights, std::int64_t size) {
  if (normalized_weights.empty()) throw Error("a blend needs at least one dataset");
  if (normalized_weights.size() >
      static_cast<std::size_t>(std::numeric_limits<std::int16_t>::max())) {
    throw Error("a blend holds at most 32767 datasets (int16 dataset index), not " +
                std::to_string(normalized_weights.size()));
  }
  if (size < 0) throw Error("blend size " + std::to_string(size) + " is negative");
  BlendIndices out;
  out.dataset_index.resize(static_cast<std::size_t>(size));
  out.dataset_sample_index.resize(static_cast<std::size_t>(size));
  std::vector<std::int64_t> counts(normalized_weights.size(), 0);
  for (std::int64_t t = 0; t < size; ++t) {
    const double position = std::max(static_cast<double>(t), 1.0);
    std::size_t best = 0;
    double best_error = normalized_weights[0] * position - static_cast<double>(counts[0]);
    for (std::size_t d = 1; d < normalized_weights.size(); ++d) {
      const double error = normalized_weights[d] * position - static_cast<double>(counts[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    out.dataset_index[static_cast<std::size_t>(t)] = static_cast<std::int16_t>(best);
    out.dataset_sample_index[static_cast<std::size_t>(t)] = counts[best]++;
  }
  return out;
}

BlendIndices build_exhaustive_blending_indices(std::span<const std::int64_t> sizes) {
  if (sizes.empty()) throw Error("a blend needs at least one dataset");
  if (sizes.size() > static_cast<std::size_t>(std::numeric_limits<std::int16_t>::max())) {
    throw Error("a blend holds at most 32767 datasets (int16 dataset index), not " +
                std::to_string(sizes.size()));
  }
  std::int64_t total = 0;
  std::set<std::size_t> unspent;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] <= 0) {
      throw Error(dataset_label(d) + " of the blend has " + std::to_string(sizes[d]) +
                  " samples; every blended dataset needs at least one");
    }
    total += sizes[d];
    unspent.insert(d);
  }
  std::vector<double> weights(sizes.size());
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    weights[d] = static_cast<double>(sizes[d]) / static_cast<double>(total);
  }

  BlendIndices out;
  out.dataset_index.reserve(static_cast<std::size_t>(total));
  out.dataset_sample_index.reserve(static_cast<std::size_t>(total));
  std::vector<std::int64_t> counts(sizes.size(), 0);
  for (std::int64_t t = 0; !unspent.empty(); ++t) {
    const double position = std::max(static_cast<double>(t), 1.0);
    std::size_t best = 0;
    double best_error = std::numeric_limits<double>::lowest();
    for (std::size_t d : unspent) {
      const double error = weights[d] * position - static_cast<double>(counts[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    out.dataset_index.push_back(static_cast<std::int16_t>(best));
    out.dataset_sample_index.push_back(counts[best]++);
    if (counts[best] == sizes[best]) unspent.erase(best);
  }
  return out;
}

bool needs_blend_layer(std::size_t num_datasets, bool has_weights, bool per_split_blend) {
  if (num_datasets != 1) return true;
  return !per_split_blend && has_weights;
}

std::vector<std::optional<std::int64_t>> plan_constituent_samples(const BlendRequest& request,
                                                                  std::size_t num_datasets) {
  if (!request.weights) return std::vector<std::optional<std::int64_t>>(num_datasets);
  if (request.weights->size() != num_datasets) {
    throw Error("the blend has " + std::to_string(num_datasets) + " datasets but " +
                std::to_string(request.weights->size()) + " weights");
  }
  if (!request.size) {
    throw Error(
        "blend weights need a requested number of samples; give a size or drop the weights");
  }
  const std::vector<double> weights = normalize_weights(*request.weights);
  const std::vector<std::int64_t> requests =
      constituent_sample_requests(weights, *request.size, request.surplus);
  return {requests.begin(), requests.end()};
}

Blend build_blend(const BlendRequest& request, std::span<const std::int64_t> constituent_lengths) {
  const std::size_t n = constituent_lengths.size();
  for (std::size_t d = 0; d < n; ++d) {
    if (constituent_lengths[d] <= 0) {
      throw Error(dataset_label(d) + " of the blend has " + std::to_string(constituent_lengths[d]) +
                  " samples; every blended dataset needs at least one");
    }
  }
  Blend blend;
  if (request.weights) {
    if (request.weights->size() != n) {
      throw Error("the blend has " + std::to_string(n) + " datasets but " +
                  std::to_string(request.weights->size()) + " weights");
    }
    if (!request.size) {
      throw Error(
          "blend weights need a requested number of samples; give a size or drop the weights");
    }
    const std::vector<double> weights = normalize_weights(*request.weights);
    for (std::size_t d = 0; d < n; ++d) {
      if (!(weights[d] > 0.0)) {
        throw Error("the weight of " + dataset_label(d) +
                    " is zero; every blend weight must be positive");
      }
    }
    std::int64_t size = 0;
    for (std::int64_t share : constituent_sample_requests(weights, *request.size, 0.0))
      size += share;
    // Megatron's BlendedDataset normalises the already normalised weights once more.
    blend.weights = normalize_weights(weights);
    blend.size = size;
    blend.indices = build_blending_indices(blend.weights, size);
  } else if (request.size) {
    std::vector<double> lengths(constituent_lengths.begin(), constituent_lengths.end());
    std::int64_t total = 0;
    for (std::int64_t length : constituent_lengths)
      total += length;
    blend.weights = normalize_weights(lengths);
    blend.size = std::min(*request.size, total);
    blend.indices = build_blending_indices(blend.weights, *blend.size);
  } else {
    blend.weights.assign(constituent_lengths.begin(), constituent_lengths.end());
    blend.weights_are_lengths = true;
    blend.indices = build_exhaustive_blending_indices(constituent_lengths);
  }
  check_counts_fit(blend.indices, constituent_lengths);
  return blend;
}

}  // namespace megatron::data
