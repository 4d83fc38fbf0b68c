// The arithmetic GPTDataset's index sizes and dtypes follow, shared by the builder and by the
// check of a loaded cache against the data.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "megatron/data/gpt_indices.h"

namespace megatron::data {

// Samples in all epochs but the last: ((E - 1) * T - extra) // S.
inline std::int64_t samples_before_final_epoch(std::int64_t tokens_per_epoch,
                                               std::int64_t num_epochs,
                                               const GptIndexOptions& options) {
  const std::int64_t extra = options.add_extra_token ? 1 : 0;
  return ((num_epochs - 1) * tokens_per_epoch - extra) / options.sequence_length;
}

// Samples in the sample index: (E * T - extra) // S, or, keeping the last partial sample, the
// ceiling computed in single precision as Megatron's helpers.cpp does.
inline std::int64_t gpt_sample_count(std::int64_t tokens_per_epoch, std::int64_t num_epochs,
                                     std::int64_t sequence_length, std::int64_t extra,
                                     bool drop_last_partial_sequence) {
  const std::int64_t usable = num_epochs * tokens_per_epoch - extra;
  if (drop_last_partial_sequence) return usable / sequence_length;
  return static_cast<std::int64_t>(
      std::ceil(static_cast<float>(usable) / static_cast<float>(sequence_length)));
}

// int32 unless a document position or a sequence length could exceed it.
inline IndexDtype sample_index_dtype(std::size_t document_index_size,
                                     std::span<const std::int32_t> sequence_lengths) {
  std::int64_t largest = static_cast<std::int64_t>(document_index_size);
  if (!sequence_lengths.empty()) {
    largest = std::max<std::int64_t>(
        largest, *std::max_element(sequence_lengths.begin(), sequence_lengths.end()));
  }
  return largest <= std::numeric_limits<std::int32_t>::max() ? IndexDtype::kInt32
                                                             : IndexDtype::kInt64;
}

// uint32 unless the sample count reaches 2^32 - 2.
inline IndexDtype shuffle_index_dtype(std::int64_t total_size) {
  return total_size >= static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max()) - 1
             ? IndexDtype::kInt64
             : IndexDtype::kUInt32;
}

}  // namespace megatron::data
