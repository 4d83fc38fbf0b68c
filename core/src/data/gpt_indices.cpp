// GPTDataset's document, sample and shuffle indices, step by step as Megatron builds them.
#include "megatron/data/gpt_indices.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "data/gpt_index_rules.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {

template <typename T>
IndexArray sample_index_as(std::span<const std::int32_t> sequence_lengths,
                           std::span<const std::int32_t> document_index,
                           std::int64_t sequence_length, std::int64_t num_samples,
                           std::int64_t extra) {
  std::vector<T> out(2 * static_cast<std::size_t>(num_samples + 1));
  const std::size_t last_position = document_index.size() - 1;
  std::size_t position = 0;
  std::int64_t offset = 0;
  out[0] = 0;
  out[1] = 0;
  for (std::int64_t sample = 1; sample <= num_samples; ++sample) {
    std::int64_t remaining = sequence_length + extra;
    while (remaining != 0) {
      const std::int64_t document_length = sequence_lengths[document_index[position]] - offset;
      remaining -= document_length;
      if (remaining <= 0) {
        // The sample ends inside this document; with the extra token its last token is also the
        // first of the next sample.
        offset += remaining + document_length - extra;
        remaining = 0;
      } else if (position == last_position) {
        if (sample != num_samples) {
          throw Error("the documents ran out at sample " + std::to_string(sample) + " of " +
                      std::to_string(num_samples) + " while building the sample index");
        }
        offset = sequence_lengths[document_index[position]] - extra;
        break;
      } else {
        ++position;
        offset = 0;
      }
    }
    out[2 * static_cast<std::size_t>(sample)] = static_cast<T>(position);
    out[2 * static_cast<std::size_t>(sample) + 1] = static_cast<T>(offset);
  }
  return IndexArray(std::move(out), {static_cast<std::size_t>(num_samples + 1), 2});
}

template <typename T>
IndexArray shuffle_index_as(std::int64_t num_samples, std::int64_t total_size,
                            NumpyRandomState& random) {
  std::vector<T> values(static_cast<std::size_t>(total_size));
  std::iota(values.begin(), values.end(), T{0});
  const std::span<T> all(values);
  const auto first = static_cast<std::size_t>(num_samples);
  random.shuffle(all.first(first));
  if (num_samples != total_size) random.shuffle(all.subspan(first));
  return IndexArray(std::move(values), {static_cast<std::size_t>(total_size)});
}

}  // namespace

std::int64_t count_tokens(std::span<const std::int32_t> sequence_ids,
                          std::span<const std::int32_t> sequence_lengths) {
  std::int64_t tokens = 0;
  for (std::int32_t id : sequence_ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= sequence_lengths.size()) {
      throw Error("sequence id " + std::to_string(id) + " is outside the dataset's " +
                  std::to_string(sequence_lengths.size()) + " sequences");
    }
    tokens += sequence_lengths[static_cast<std::size_t>(id)];
  }
  return tokens;
}

std::int64_t gpt_num_epochs(std::int64_t tokens_per_epoch, const GptIndexOptions& options) {
  if (!options.num_samples) return 1;
  if (tokens_per_epoch <= 0) {
    throw Error("cannot draw " + std::to_string(*options.num_samples) +
                " samples from a split without tokens");
  }
  const std::int64_t requested =
      *options.num_samples * options.sequence_length + (options.add_extra_token ? 1 : 0);
  return std::max<std::int64_t>(1, (requested + tokens_per_epoch - 1) / tokens_per_epoch);
}

bool gpt_separate_final_epoch(std::int64_t tokens_per_epoch, std::int64_t num_epochs,
                              const GptIndexOptions& options) {
  if (num_epochs <= 1 || !options.num_samples) return false;
  const std::int64_t extra = options.add_extra_token ? 1 : 0;
  const std::int64_t sans_final = samples_before_final_epoch(tokens_per_epoch, num_epochs, options);
  const std::int64_t from_final = *options.num_samples - sans_final;
  const std::int64_t per_epoch = (tokens_per_epoch - extra) / options.sequence_length;
  if (from_final < 0 || from_final > per_epoch + 1) {
    throw Error("the final epoch would give " + std::to_string(from_final) +
                " samples, outside [0, " + std::to_string(per_epoch + 1) + "]");
  }
  return from_final < static_cast<std::int64_t>(0.80 * static_cast<double>(per_epoch));
}

std::vector<std::int32_t> build_document_index(std::span<const std::int32_t> sequence_ids,
                                               std::int64_t num_epochs, NumpyRandomState& random,
                                               bool separate_final_epoch) {
  if (separate_final_epoch && num_epochs > 1) {
    std::vector<std::int32_t> index =
        build_document_index(sequence_ids, num_epochs - 1, random, false);
    const std::vector<std::int32_t> last = build_document_index(sequence_ids, 1, random, false);
    index.insert(index.end(), last.begin(), last.end());
    return index;
  }
  std::vector<std::int32_t> index;
  index.reserve(sequence_ids.size() * static_cast<std::size_t>(num_epochs));
  for (std::int64_t epoch = 0; epoch < num_epochs; ++epoch) {
    index.insert(index.end(), sequence_ids.begin(), sequence_ids.end());
  }
  random.shuffle(std::span(index));
  return index;
}

IndexArray build_sample_index(std::span<const std::int32_t> sequence_lengths,
                              std::span<const std::int32_t> document_index,
                              std::int64_t sequence_length, std::int64_t num_epochs,
                              std::int64_t tokens_per_epoch, bool drop_last_partial_sequence,
                              bool add_extra_token) {
  if (sequence_length <= 1) {
    throw Error("sequence length " + std::to_string(sequence_length) + " must be at least 2");
  }
  if (tokens_per_epoch <= 1) {
    throw Error("a split of " + std::to_string(tokens_per_epoch) +
                " token(s) cannot be cut into samples; it needs at least 2");
  }
  if (num_epochs <= 0 || document_index.empty()) {
    throw Error("the sample index needs at least one epoch of documents");
  }
  const std::int64_t extra = add_extra_token ? 1 : 0;
  const std::int64_t num_samples = gpt_sample_count(tokens_per_epoch, num_epochs, sequence_length,
                                                    extra, drop_last_partial_sequence);
  if (sample_index_dtype(document_index.size(), sequence_lengths) == IndexDtype::kInt32) {
    return sample_index_as<std::int32_t>(sequence_lengths, document_index, sequence_length,
                                         num_samples, extra);
  }
  return sample_index_as<std::int64_t>(sequence_lengths, document_index, sequence_length,
                                       num_samples, extra);
}

IndexArray build_shuffle_index(std::int64_t num_samples, std::int64_t total_size,
                               NumpyRandomState& random) {
  if (num_samples < 0 || num_samples > total_size) {
    throw Error("shuffle index: the first range [0, " + std::to_string(num_samples) +
                ") does not fit in [0, " + std::to_string(total_size) + ")");
  }
  if (shuffle_index_dtype(total_size) == IndexDtype::kUInt32) {
    return shuffle_index_as<std::uint32_t>(num_samples, total_size, random);
  }
  return shuffle_index_as<std::int64_t>(num_samples, total_size, random);
}

GptIndices build_gpt_indices(std::span<const std::int32_t> sequence_ids,
                             std::span<const std::int32_t> sequence_lengths,
                             const GptIndexOptions& options) {
  if (options.sequence_length <= 1) {
    throw Error("sequence length " + std::to_string(options.sequence_length) +
                " must be at least 2");
  }
  if (options.num_samples && *options.num_samples < 0) {
    throw Error("requested sample count " + std::to_string(*options.num_samples) + " is negative");
  }
  GptIndices out;
  out.sequence_length = options.sequence_length;
  out.add_extra_token = options.add_extra_token;
  out.tokens_per_epoch = count_tokens(sequence_ids, sequence_lengths);
  if (out.tokens_per_epoch <= 1) {
    throw Error("the split has " + std::to_string(sequence_ids.size()) + " sequence(s) with " +
                std::to_string(out.tokens_per_epoch) +
                " token(s) in all; at least 2 tokens are needed to cut samples");
  }
  NumpyRandomState random(options.seed);
  out.num_epochs = gpt_num_epochs(out.tokens_per_epoch, options);
  out.separate_final_epoch =
      gpt_separate_final_epoch(out.tokens_per_epoch, out.num_epochs, options);

  out.document_index =
      build_document_index(sequence_ids, out.num_epochs, random, out.separate_final_epoch);
  out.sample_index = build_sample_index(
      sequence_lengths, out.document_index, options.sequence_length, out.num_epochs,
      out.tokens_per_epoch, options.drop_last_partial_sequence, options.add_extra_token);
  const auto num_samples = static_cast<std::int64_t>(out.sample_index.rows()) - 1;
  const std::int64_t first_range =
      out.separate_final_epoch
          ? samples_before_final_epoch(out.tokens_per_epoch, out.num_epochs, options)
          : num_samples;
  out.shuffle_index = build_shuffle_index(first_range, num_samples, random);
  return out;
}

std::vector<SamplePiece> GptIndices::sample_pieces(
    std::int64_t item, std::span<const std::int32_t> sequence_lengths) const {
  if (item < 0 || item >= size()) {
    throw Error("sample " + std::to_string(item) + " is outside the dataset's " +
                std::to_string(size()) + " samples");
  }
  const auto sample = static_cast<std::size_t>(shuffle_index[static_cast<std::size_t>(item)]);
  const std::int64_t begin_position = sample_index.at(sample, 0);
  const std::int64_t begin_offset = sample_index.at(sample, 1);
  const std::int64_t end_position = sample_index.at(sample + 1, 0);
  const std::int64_t end_offset = sample_index.at(sample + 1, 1);
  const std::int64_t extra = add_extra_token ? 1 : 0;

  std::vector<SamplePiece> pieces;
  for (std::int64_t position = begin_position; position <= end_position; ++position) {
    const std::int32_t id = document_index[static_cast<std::size_t>(position)];
    const std::int64_t offset = position == begin_position ? begin_offset : 0;
    const std::int64_t length = position == end_position
                                    ? end_offset + extra - offset
                                    : sequence_lengths[static_cast<std::size_t>(id)] - offset;
    pieces.push_back({id, offset, length});
  }
  return pieces;
}

}  // namespace megatron::data
