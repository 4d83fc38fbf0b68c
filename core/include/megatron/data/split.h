// Megatron's train/valid/test split of one low-level dataset (`--split "949,50,1"`) and the number
// of samples the training loop asks of each split.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace megatron::data {

enum class Split { kTrain = 0, kValid = 1, kTest = 2 };
inline constexpr std::array<Split, 3> kSplits = {Split::kTrain, Split::kValid, Split::kTest};
// The split's place in per-split arrays: train 0, valid 1, test 2.
inline constexpr std::size_t split_slot(Split split) {
  return static_cast<std::size_t>(split);
}

// Megatron's Split enum names ("train", "valid", "test"), used in cache file names.
std::string_view split_name(Split split);

// The legacy default when a data path is given without a split.
inline constexpr std::string_view kDefaultSplit = "969, 30, 1";

// The split string's weights normalised to sum to 1: every run of [.0-9] is a number (so signs
// and separators are ignored, as in Megatron), padded with zeros to three. Throws megatron::Error
// for more than three numbers, an unparsable number or an all-zero split.
std::array<double, 3> parse_split(std::string_view split);

// One split's share of the low-level dataset: [begin, end) as fractions.
struct SplitBookends {
  double begin = 0;
  double end = 0;
  bool operator==(const SplitBookends&) const = default;
};
// Per split, its book-ends, or nullopt when the split has zero width (that split is not built).
using SplitMatrix = std::array<std::optional<SplitBookends>, 3>;

// The cumulative book-ends of normalised weights, with Megatron's floating-point sums.
SplitMatrix split_matrix(const std::array<double, 3>& weights);

// Element ids [begin, end) of a split over a low-level dataset of `num_elements` elements
// (sequences for GPT): round(b * E) with round-half-to-even, as Python's round.
struct ElementRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
  bool operator==(const ElementRange&) const = default;
};
ElementRange split_element_range(const SplitBookends& bookends, std::int64_t num_elements);

// What the training schedule asks of each split, as Megatron's get_train_valid_test_num_samples:
// train = train_samples or train_iters * global batch; valid = (train_iters / eval_interval + 1)
// * eval_iters * global batch; test = eval_iters * global batch. `train_iters` is the resolved
// iteration count (Megatron derives it from train_samples when those are given).
struct SampleSchedule {
  std::int64_t train_iters = 0;
  std::optional<std::int64_t> train_samples;
  std::int64_t global_batch_size = 0;
  std::int64_t eval_interval = 0;
  std::int64_t eval_iters = 0;
};
std::array<std::int64_t, 3> samples_per_split(const SampleSchedule& schedule);

}  // namespace megatron::data
