// BERTMaskedWordPieceDataset.__getitem__: segments A and B, sentence-order swap, truncation,
// [CLS] A [SEP] B [SEP] layout, masking and padding, drawing from the sample's own RandomState.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "megatron/data/indexed_dataset.h"
#include "megatron/data/masked_samples.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {

// A segment is a range of the concatenated sentences, so truncation moves its ends instead of
// erasing tokens.
struct Segment {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};

}  // namespace

std::int64_t masked_sample_seed(std::int64_t seed, std::int64_t sample_index) {
  constexpr std::int64_t kModulus = std::int64_t{1} << 32;
  const std::int64_t sum = seed % kModulus + sample_index % kModulus;
  return ((sum % kModulus) + kModulus) % kModulus;
}

SampleMappingOptions bert_sample_mapping_options(const BertSampleOptions& options,
                                                 std::optional<std::int64_t> num_samples) {
  if (options.sequence_length - 3 > std::numeric_limits<std::int32_t>::max() ||
      options.seed > std::numeric_limits<std::int32_t>::max()) {
    throw Error("BERT sample mapping: the sequence length and the seed must fit in int32");
  }
  SampleMappingOptions out;
  out.num_samples = num_samples;
  out.max_seq_length = static_cast<std::int32_t>(options.sequence_length - 3);
  out.short_seq_prob = options.short_sequence_probability;
  out.seed = static_cast<std::int32_t>(options.seed);
  out.min_num_sent = options.classification_head ? 2 : 1;
  return out;
}

BertSample make_bert_sample(std::span<const std::vector<std::int64_t>> sentences,
                            std::int64_t target_sequence_length, std::int64_t sample_index,
                            const BertSampleOptions& options,
                            const WordPieceVocabulary& vocabulary) {
  if (target_sequence_length < 0 || target_sequence_length > options.sequence_length) {
    throw Error("BERT sample " + std::to_string(sample_index) + ": target length " +
                std::to_string(target_sequence_length) + " is outside [0, " +
                std::to_string(options.sequence_length) + "]");
  }
  if (sample_index < 0) {
    throw Error("BERT sample index " + std::to_string(sample_index) + " is negative");
  }
  NumpyRandomState random(masked_sample_seed(options.seed, sample_index));

  // Split the sentences at a pivot into A | B; with the binary head, swap them half the time.
  std::size_t pivot = sentences.size();
  bool is_random = false;
  if (options.classification_head) {
    if (sentences.size() < 2) {
      throw Error("BERT sample " + std::to_string(sample_index) + " has " +
                  std::to_string(sentences.size()) +
                  " sentence(s); the binary head needs at least two");
    }
    pivot = 1;
    if (sentences.size() >= 3) {
      pivot =
          static_cast<std::size_t>(random.randint(1, static_cast<std::int64_t>(sentences.size())));
    }
    is_random = random.random() < 0.5;
  }
  std::vector<std::int64_t> joined;
  Segment a, b;
  for (std::size_t s = 0; s < sentences.size(); ++s) {
    if (s == pivot) a.end = b.begin = joined.size();
    joined.insert(joined.end(), sentences[s].begin(), sentences[s].end());
  }
  if (pivot == sentences.size()) a.end = b.begin = joined.size();
  b.end = joined.size();
  if (is_random) std::swap(a, b);

  // Trim the longer segment (B on a tie) from a random end until both fit the target.
  bool truncated = false;
  while (static_cast<std::int64_t>(a.size() + b.size()) > target_sequence_length) {
    Segment& longer = a.size() > b.size() ? a : b;
    if (random.random() < 0.5) {
      ++longer.begin;
    } else {
      --longer.end;
    }
    truncated = true;
  }

  std::vector<std::int64_t> tokens{vocabulary.cls};
  tokens.insert(tokens.end(), joined.begin() + static_cast<std::ptrdiff_t>(a.begin),
                joined.begin() + static_cast<std::ptrdiff_t>(a.end));
  tokens.push_back(vocabulary.sep);
  std::vector<std::int64_t> types(tokens.size(), 0);
  if (b.size() > 0) {
    tokens.insert(tokens.end(), joined.begin() + static_cast<std::ptrdiff_t>(b.begin),
                  joined.begin() + static_cast<std::ptrdiff_t>(b.end));
    tokens.push_back(vocabulary.sep);
    types.resize(tokens.size(), 1);
  }

  MaskedLmPredictions masked = create_masked_lm_predictions(
      tokens, target_sequence_length, options.masking, vocabulary, MaskReplacement::kBert, random);

  const auto length = static_cast<std::int64_t>(tokens.size());
  if (length > options.sequence_length) {
    throw Error("BERT sample " + std::to_string(sample_index) + " has " + std::to_string(length) +
                " tokens, more than the sequence length " +
                std::to_string(options.sequence_length));
  }
  const auto size = static_cast<std::size_t>(options.sequence_length);
  BertSample out;
  out.text = std::move(masked.tokens);
  out.text.resize(size, vocabulary.pad);
  out.types = std::move(types);
  out.types.resize(size, vocabulary.pad);  // Megatron pads the types with the pad id too
  out.padding_mask.assign(tokens.size(), 1);
  out.padding_mask.resize(size, vocabulary.pad);
  out.labels.assign(size, -1);
  out.loss_mask.assign(size, 0);
  for (std::size_t k = 0; k < masked.positions.size(); ++k) {
    const auto position = static_cast<std::size_t>(masked.positions[k]);
    out.labels[position] = masked.labels[k];
    out.loss_mask[position] = 1;
  }
  out.is_random = is_random ? 1 : 0;
  out.truncated = truncated ? 1 : 0;
  return out;
}

BertSample make_bert_sample(const IndexedDataset& dataset, const IndexArray& mapping,
                            std::int64_t sample_index, const BertSampleOptions& options,
                            const WordPieceVocabulary& vocabulary) {
  const MappedSentences row = read_mapped_sentences(dataset, mapping, sample_index, "BERT");
  return make_bert_sample(row.sentences, row.target_length, sample_index, options, vocabulary);
}

}  // namespace megatron::data
