// helpers.cpp build_mapping: the (first sentence, end sentence, target length) rows of the
// masked datasets, with Megatron's std::mt19937 target lengths and std::mt19937_64 shuffle.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "megatron/data/indexed_dataset.h"
#include "megatron/data/masked_samples.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {

void check_options(const SampleMappingOptions& options) {
  if (options.num_samples && *options.num_samples < 0) {
    throw Error("sample mapping: num_samples must not be negative, found " +
                std::to_string(*options.num_samples));
  }
  if (options.max_seq_length < 2) {
    throw Error("sample mapping: the maximum target length must be at least 2, found " +
                std::to_string(options.max_seq_length) +
                " (it is the sequence length minus 3 for BERT, minus 2 for T5)");
  }
  if (!(options.short_seq_prob >= 0.0 && options.short_seq_prob <= 1.0)) {
    throw Error("sample mapping: short_seq_prob must be in [0, 1], found " +
                std::to_string(options.short_seq_prob));
  }
  // Megatron asserts seed > 0 and seeds the shuffle with the int32 seed + 1.
  if (options.seed <= 0 || options.seed == std::numeric_limits<std::int32_t>::max()) {
    throw Error("sample mapping: the random seed must be in [1, 2147483646], found " +
                std::to_string(options.seed));
  }
  // Megatron converts the probability to an int32 ratio; smaller probabilities would overflow it.
  if (options.short_seq_prob > 0 &&
      std::round(1.0 / options.short_seq_prob) > std::numeric_limits<std::int32_t>::max()) {
    throw Error("sample mapping: short_seq_prob " + std::to_string(options.short_seq_prob) +
                " is too small: 1 / short_seq_prob must fit in int32");
  }
  if (options.min_num_sent < 1) {
    throw Error("sample mapping: min_num_sent must be at least 1, found " +
                std::to_string(options.min_num_sent));
  }
}

void check_documents(std::span<const std::int64_t> document_indices, std::int64_t begin,
                     std::int64_t end, std::size_t sentence_count) {
  const auto documents = static_cast<std::int64_t>(document_indices.size()) - 1;
  if (begin < 0 || end > documents || begin >= end) {
    throw Error("sample mapping: the document range [" + std::to_string(begin) + ", " +
                std::to_string(end) + ") is empty or outside the dataset's " +
                std::to_string(std::max<std::int64_t>(documents, 0)) + " documents");
  }
  for (std::int64_t k = begin; k <= end; ++k) {
    const std::int64_t boundary = document_indices[static_cast<std::size_t>(k)];
    const bool decreasing =
        k > begin && boundary < document_indices[static_cast<std::size_t>(k - 1)];
    if (boundary < 0 || static_cast<std::uint64_t>(boundary) > sentence_count || decreasing) {
      throw Error("sample mapping: document index entry " + std::to_string(k) + " (" +
                  std::to_string(boundary) + ") is not a non-decreasing sentence boundary in [0, " +
                  std::to_string(sentence_count) + "]");
    }
  }
}

// get_target_sample_len: max_length, except when the draw is a multiple of the ratio.
std::int64_t target_length(std::int64_t short_seq_ratio, std::int64_t max_length,
                           std::mt19937& generator) {
  if (short_seq_ratio == 0) return max_length;
  const std::uint64_t draw = generator();
  if (draw % static_cast<std::uint64_t>(short_seq_ratio) == 0) {
    return 2 + static_cast<std::int64_t>(draw % static_cast<std::uint64_t>(max_length - 1));
  }
  return max_length;
}

struct Row {
  std::int64_t first = 0;
  std::int64_t end = 0;
  std::int64_t target = 0;
};

// One epoch over the documents, appending its rows; the generator runs on across epochs.
void add_epoch(std::span<const std::int64_t> boundaries,
               std::span<const std::int32_t> sentence_lengths, const SampleMappingOptions& options,
               std::int64_t short_seq_ratio, std::mt19937& generator, std::vector<Row>& rows) {
  for (std::size_t doc = 0; doc + 1 < boundaries.size(); ++doc) {
    const std::int64_t first = boundaries[doc];
    const std::int64_t last = boundaries[doc + 1];
    std::int64_t remaining = last - first;
    // Only documents of two or more sentences are checked for long sentences.
    bool long_sentence = false;
    if (remaining > 1) {
      for (std::int64_t s = first; s < last && !long_sentence; ++s) {
        long_sentence = sentence_lengths[static_cast<std::size_t>(s)] > kLongSentenceLength;
      }
    }
    if (remaining < options.min_num_sent || long_sentence) continue;

    std::int64_t start = first;
    std::int64_t length = 0;
    std::int64_t sentences = 0;
    std::int64_t target = target_length(short_seq_ratio, options.max_seq_length, generator);
    for (std::int64_t s = first; s < last; ++s) {
      length += sentence_lengths[static_cast<std::size_t>(s)];
      ++sentences;
      --remaining;
      // A row closes at the target length if it keeps one sentence back for the next row and
      // has its minimum, or at the end of the document. Each row draws the next target.
      if ((length >= target && remaining > 1 && sentences >= options.min_num_sent) ||
          remaining == 0) {
        rows.push_back({start, s + 1, target});
        start = s + 1;
        target = target_length(short_seq_ratio, options.max_seq_length, generator);
        length = 0;
        sentences = 0;
      }
    }
  }
}

template <typename T>
IndexArray shuffled_rows(const std::vector<Row>& rows, std::int32_t seed) {
  std::vector<T> values;
  values.reserve(rows.size() * 3);
  for (const Row& row : rows) {
    values.push_back(static_cast<T>(row.first));
    values.push_back(static_cast<T>(row.end));
    values.push_back(static_cast<T>(row.target));
  }
  // Fisher-Yates with a 64-bit engine, rows swapped whole.
  std::mt19937_64 generator(static_cast<std::uint64_t>(seed + 1));
  for (std::size_t i = rows.size(); i-- > 1;) {
    const auto j = static_cast<std::size_t>(generator() % (i + 1));
    for (std::size_t c = 0; c < 3; ++c)
      std::swap(values[3 * i + c], values[3 * j + c]);
  }
  return IndexArray(std::move(values), {rows.size(), 3});
}

}  // namespace

IndexArray build_sample_mapping(std::span<const std::int64_t> document_indices,
                                std::int64_t document_begin, std::int64_t document_end,
                                std::span<const std::int32_t> sentence_lengths,
                                const SampleMappingOptions& options) {
  check_options(options);
  check_documents(document_indices, document_begin, document_end, sentence_lengths.size());
  const auto boundaries =
      document_indices.subspan(static_cast<std::size_t>(document_begin),
                               static_cast<std::size_t>(document_end - document_begin + 1));

  // Megatron's round() of the inverse probability: halves away from zero.
  const std::int64_t short_seq_ratio =
      options.short_seq_prob > 0
          ? static_cast<std::int32_t>(std::round(1.0 / options.short_seq_prob))
          : 0;

  // With num_samples, Megatron runs up to INT32_MAX - 1 epochs and stops before an epoch once
  // the rows reach num_samples; without, it runs one epoch.
  std::mt19937 generator(static_cast<std::uint32_t>(options.seed));
  std::vector<Row> rows;
  if (!options.num_samples) {
    add_epoch(boundaries, sentence_lengths, options, short_seq_ratio, generator, rows);
  } else {
    const auto wanted = static_cast<std::size_t>(*options.num_samples);
    for (std::int32_t epoch = 0;
         epoch < std::numeric_limits<std::int32_t>::max() - 1 && rows.size() < wanted; ++epoch) {
      add_epoch(boundaries, sentence_lengths, options, short_seq_ratio, generator, rows);
      if (rows.empty()) {
        throw Error("sample mapping: none of documents [" + std::to_string(document_begin) + ", " +
                    std::to_string(document_end) + ") yields a sample: each has fewer than " +
                    std::to_string(options.min_num_sent) + " sentences or a sentence longer than " +
                    std::to_string(kLongSentenceLength) +
                    " tokens; was the data preprocessed with --split-sentences?");
      }
    }
  }

  if (sentence_lengths.size() > std::numeric_limits<std::uint32_t>::max()) {
    return shuffled_rows<std::int64_t>(rows, options.seed);
  }
  return shuffled_rows<std::uint32_t>(rows, options.seed);
}

SampleMappingRow sample_mapping_row(const IndexArray& mapping, std::int64_t row) {
  if (mapping.shape().size() != 2 || mapping.shape()[1] != 3) {
    throw Error("sample mapping: expected an array of shape (n, 3)");
  }
  if (row < 0 || static_cast<std::size_t>(row) >= mapping.rows()) {
    throw Error("sample mapping: row " + std::to_string(row) + " is outside [0, " +
                std::to_string(mapping.rows()) + ")");
  }
  const auto r = static_cast<std::size_t>(row);
  return {mapping.at(r, 0), mapping.at(r, 1), mapping.at(r, 2)};
}

MappedSentences read_mapped_sentences(const IndexedDataset& dataset, const IndexArray& mapping,
                                      std::int64_t sample_index, std::string_view sample_kind) {
  const SampleMappingRow row = sample_mapping_row(mapping, sample_index);
  if (row.first_sentence < 0 || row.first_sentence > row.end_sentence ||
      static_cast<std::uint64_t>(row.end_sentence) > dataset.size()) {
    throw Error(std::string(sample_kind) + " sample " + std::to_string(sample_index) +
                ": sentences [" + std::to_string(row.first_sentence) + ", " +
                std::to_string(row.end_sentence) + ") are outside " + dataset.idx_file().string() +
                "'s " + std::to_string(dataset.size()) + " sequences");
  }
  MappedSentences out;
  for (std::int64_t s = row.first_sentence; s < row.end_sentence; ++s)
    out.sentences.push_back(dataset.get(static_cast<std::size_t>(s)));
  out.target_length = row.target_length;
  return out;
}

}  // namespace megatron::data
