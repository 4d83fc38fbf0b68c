// The masked datasets' sample index caches (BERTMaskedWordPieceDataset, T5MaskedWordPieceDataset):
// Megatron's descriptions, their file names, and a loaded mapping checked against the split it
// claims to cover.
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>

#include "data/index_cache_files.h"
#include "megatron/data/masked_samples.h"
#include "megatron/data/t5_samples.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {

namespace fs = std::filesystem;

// Every row must be a non-empty run of the split's sentences with a target build_mapping can
// draw, and there must be at least num_samples rows.
void check_mapping(const fs::path& path, const IndexArray& mapping, IndexDtype dtype,
                   std::int64_t first_sentence, std::int64_t end_sentence, std::int64_t max_target,
                   std::optional<std::int64_t> num_samples) {
  if (mapping.dtype() != dtype || mapping.shape().size() != 2 || mapping.shape()[1] != 3) {
    cache::refuse(
        path, std::string("a ") + std::string(dtype_name(dtype)) + " array of shape (n, 3)",
        std::string(dtype_name(mapping.dtype())) + " " + cache::shape_text(mapping.shape()));
  }
  if (num_samples && static_cast<std::int64_t>(mapping.rows()) < *num_samples) {
    cache::refuse(path, "at least " + std::to_string(*num_samples) + " rows",
                  std::to_string(mapping.rows()));
  }
  for (std::size_t r = 0; r < mapping.rows(); ++r) {
    const std::int64_t first = mapping.at(r, 0);
    const std::int64_t end = mapping.at(r, 1);
    const std::int64_t target = mapping.at(r, 2);
    if (first < first_sentence || end <= first || end > end_sentence || target < 2 ||
        target > max_target) {
      cache::refuse(path,
                    "rows of sentences within [" + std::to_string(first_sentence) + ", " +
                        std::to_string(end_sentence) + ") and target lengths in [2, " +
                        std::to_string(max_target) + "]",
                    "(" + std::to_string(first) + ", " + std::to_string(end) + ", " +
                        std::to_string(target) + ") at row " + std::to_string(r));
    }
  }
}

}  // namespace

TokenizerIdentity wordpiece_tokenizer_identity(bool lower_case, const std::string& vocab_file,
                                               std::int64_t vocab_extra_ids) {
  TokenizerIdentity identity;
  identity.class_name = "_BertWordPieceTokenizer";
  identity.paths = {vocab_file};
  identity.options = {{"lower_case", lower_case ? "True" : "False"},
                      {"vocab_extra_ids", std::to_string(vocab_extra_ids)}};
  return identity;
}

namespace {

// The description fields every MaskedWordPieceDataset shares, in Megatron's order; the subclass
// appends its own.
cache::Json masked_description(std::string_view class_name, const GptDatasetIdentity& identity,
                               std::optional<std::int64_t> num_samples, std::int64_t seed,
                               std::int64_t sequence_length, const MaskingOptions& masking,
                               double short_sequence_probability) {
  cache::Json description =
      cache::dataset_description(class_name, identity, num_samples, seed, sequence_length);
  description["masking_probability"] = masking.masking_probability;
  description["short_sequence_probability"] = short_sequence_probability;
  description["masking_max_ngram"] = masking.masking_max_ngram;
  description["masking_do_full_word"] = masking.masking_do_full_word;
  description["masking_do_permutation"] = masking.masking_do_permutation;
  description["masking_use_longer_ngrams"] = masking.masking_use_longer_ngrams;
  description["masking_use_geometric_distribution"] = masking.masking_use_geometric_distribution;
  return description;
}

}  // namespace

std::string bert_description(const GptDatasetIdentity& identity, const BertSampleOptions& options,
                             std::optional<std::int64_t> num_samples) {
  cache::Json description = masked_description(kBertDatasetClass, identity, num_samples,
                                               options.seed, options.sequence_length,
                                               options.masking, options.short_sequence_probability);
  description["classification_head"] = options.classification_head;
  return cache::dump(description);
}

std::string t5_description(const GptDatasetIdentity& identity, const T5SampleOptions& options,
                           std::optional<std::int64_t> num_samples) {
  cache::Json description = masked_description(kT5DatasetClass, identity, num_samples, options.seed,
                                               options.encoder_length, options.masking,
                                               options.short_sequence_probability);
  description["sequence_length_decoder"] = options.decoder_length;
  return cache::dump(description);
}

fs::path default_masked_cache_dir(const std::string& dataset_path, std::string_view class_name) {
  return fs::path(dataset_path) / "cache" / (std::string(class_name) + "_indices");
}

fs::path default_bert_cache_dir(const std::string& dataset_path) {
  return default_masked_cache_dir(dataset_path, kBertDatasetClass);
}

MaskedCacheFiles masked_cache_files(const fs::path& cache_dir, std::string_view class_name,
                                    const std::string& description) {
  const std::string base = description_md5(description) + "-" + std::string(class_name) + "-";
  return {cache_dir / (base + "description.txt"), cache_dir / (base + "sample_index.npy")};
}

MaskedCacheFiles bert_cache_files(const fs::path& cache_dir, const std::string& description) {
  return masked_cache_files(cache_dir, kBertDatasetClass, description);
}

IndexArray load_or_build_masked_sample_mapping(
    const fs::path& cache_dir, std::string_view class_name, const std::string& description,
    const SampleMappingOptions& mapping_options, std::span<const std::int64_t> document_indices,
    std::int64_t document_begin, std::int64_t document_end,
    std::span<const std::int32_t> sentence_lengths, bool* built) {
  const std::optional<std::int64_t> num_samples = mapping_options.num_samples;
  const MaskedCacheFiles files = masked_cache_files(cache_dir, class_name, description);

  const bool complete =
      fs::is_regular_file(files.description) && fs::is_regular_file(files.sample_index);
  // Files under this name but with another description are stale (or an MD5 collision): rebuilt.
  if (complete && cache::read_text(files.description) == description) {
    // The split's sentence range, from a document range checked as build_sample_mapping does.
    const auto documents = static_cast<std::int64_t>(document_indices.size()) - 1;
    if (document_begin < 0 || document_end > documents || document_begin >= document_end) {
      throw Error("sample mapping: the document range [" + std::to_string(document_begin) + ", " +
                  std::to_string(document_end) + ") is empty or outside the dataset's documents");
    }
    IndexArray mapping = read_npy(files.sample_index);
    const IndexDtype dtype = sentence_lengths.size() > std::numeric_limits<std::uint32_t>::max()
                                 ? IndexDtype::kInt64
                                 : IndexDtype::kUInt32;
    check_mapping(files.sample_index, mapping, dtype,
                  document_indices[static_cast<std::size_t>(document_begin)],
                  document_indices[static_cast<std::size_t>(document_end)],
                  mapping_options.max_seq_length, num_samples);
    if (built) *built = false;
    return mapping;
  }

  IndexArray mapping = build_sample_mapping(document_indices, document_begin, document_end,
                                            sentence_lengths, mapping_options);
  std::error_code error;
  fs::create_directories(cache_dir, error);
  if (error) {
    throw Error(cache_dir.string() +
                ": cannot create the dataset index cache folder: " + error.message());
  }
  cache::write_atomically(files.sample_index, [&](const fs::path& p) { write_npy(p, mapping); });
  cache::write_text_atomically(files.description, description);
  if (built) *built = true;
  return mapping;
}

IndexArray load_or_build_t5_sample_mapping(
    const fs::path& cache_dir, const GptDatasetIdentity& identity, const T5SampleOptions& options,
    std::optional<std::int64_t> num_samples, std::span<const std::int64_t> document_indices,
    std::int64_t document_begin, std::int64_t document_end,
    std::span<const std::int32_t> sentence_lengths, bool* built) {
  return load_or_build_masked_sample_mapping(
      cache_dir, kT5DatasetClass, t5_description(identity, options, num_samples),
      t5_sample_mapping_options(options, num_samples), document_indices, document_begin,
      document_end, sentence_lengths, built);
}

IndexArray load_or_build_bert_sample_mapping(
    const fs::path& cache_dir, const GptDatasetIdentity& identity, const BertSampleOptions& options,
    std::optional<std::int64_t> num_samples, std::span<const std::int64_t> document_indices,
    std::int64_t document_begin, std::int64_t document_end,
    std::span<const std::int32_t> sentence_lengths, bool* built) {
  return load_or_build_masked_sample_mapping(
      cache_dir, kBertDatasetClass, bert_description(identity, options, num_samples),
      bert_sample_mapping_options(options, num_samples), document_indices, document_begin,
      document_end, sentence_lengths, built);
}

}  // namespace megatron::data
