// Split strings, split book-ends and element ranges, and the per-split sample counts.
#include "megatron/data/split.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "megatron/data/blend.h"
#include "megatron/error.h"

namespace megatron::data {

std::string_view split_name(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kValid:
      return "valid";
    case Split::kTest:
      return "test";
  }
  return "unknown";
}

std::array<double, 3> parse_split(std::string_view split) {
  const auto is_number_char = [](char c) {
    return c == '.' || std::isdigit(static_cast<unsigned char>(c));
  };
  std::vector<double> values;
  for (std::size_t pos = 0; pos < split.size();) {
    if (!is_number_char(split[pos])) {
      ++pos;
      continue;
    }
    std::size_t end = pos;
    while (end < split.size() && is_number_char(split[end]))
      ++end;
    const std::string_view token = split.substr(pos, end - pos);
    double value = 0;
    const auto [stop, error] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (error != std::errc() || stop != token.data() + token.size()) {
      throw Error("split '" + std::string(split) + "': '" + std::string(token) + "' at character " +
                  std::to_string(pos + 1) + " is not a number");
    }
    values.push_back(value);
    pos = end;
  }
  if (values.size() > 3) {
    throw Error("split '" + std::string(split) + "' has " + std::to_string(values.size()) +
                " weights; expected at most 3 (train, valid, test)");
  }
  values.resize(3, 0.0);
  std::vector<double> normalized;
  try {
    normalized = normalize_weights(values);
  } catch (const Error&) {
    throw Error("split '" + std::string(split) +
                "' gives every split zero weight; expected weights like \"949,50,1\"");
  }
  return {normalized[0], normalized[1], normalized[2]};
}

SplitMatrix split_matrix(const std::array<double, 3>& weights) {
  SplitMatrix matrix;
  double begin = 0.0;
  for (std::size_t i = 0; i < 3; ++i) {
    const double end = begin + weights[i];
    if (end > begin) matrix[i] = SplitBookends{begin, end};
    begin = end;
  }
  return matrix;
}

ElementRange split_element_range(const SplitBookends& bookends, std::int64_t num_elements) {
  const double elements = static_cast<double>(num_elements);
  // std::nearbyint rounds half to even under the default rounding mode, as Python's round does.
  return {static_cast<std::int64_t>(std::nearbyint(bookends.begin * elements)),
          static_cast<std::int64_t>(std::nearbyint(bookends.end * elements))};
}

std::array<std::int64_t, 3> samples_per_split(const SampleSchedule& schedule) {
  if (schedule.global_batch_size <= 0) {
    throw Error("global batch size " + std::to_string(schedule.global_batch_size) +
                " must be positive to size the dataset splits");
  }
  if (schedule.eval_interval <= 0) {
    throw Error("eval interval " + std::to_string(schedule.eval_interval) +
                " must be positive to size the validation split");
  }
  const std::int64_t train =
      schedule.train_samples.value_or(schedule.train_iters * schedule.global_batch_size);
  const std::int64_t valid_iters =
      (schedule.train_iters / schedule.eval_interval + 1) * schedule.eval_iters;
  return {train, valid_iters * schedule.global_batch_size,
          schedule.eval_iters * schedule.global_batch_size};
}

}  // namespace megatron::data
