// GPTDataset index cache: Megatron's description JSON, its MD5, and the .npy files named after it.
#include <string>
#include <system_error>

#include <openssl/evp.h>

#include "data/gpt_index_rules.h"
#include "data/index_cache_files.h"
#include "megatron/data/gpt_indices.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {

namespace fs = std::filesystem;
using cache::check_array;
using cache::check_range;

// The loaded arrays must be the ones these options would build over this data: same sizes and
// dtypes, every id and position in range, so nothing later reads outside the dataset.
GptIndices validated(const fs::path& document_path, const fs::path& sample_path,
                     const fs::path& shuffle_path, std::span<const std::int32_t> sequence_ids,
                     std::span<const std::int32_t> sequence_lengths,
                     const GptIndexOptions& options) {
  GptIndices out;
  out.sequence_length = options.sequence_length;
  out.add_extra_token = options.add_extra_token;
  out.tokens_per_epoch = count_tokens(sequence_ids, sequence_lengths);
  out.num_epochs = gpt_num_epochs(out.tokens_per_epoch, options);
  out.separate_final_epoch =
      gpt_separate_final_epoch(out.tokens_per_epoch, out.num_epochs, options);
  const std::size_t documents = sequence_ids.size() * static_cast<std::size_t>(out.num_epochs);
  const std::int64_t samples =
      gpt_sample_count(out.tokens_per_epoch, out.num_epochs, options.sequence_length,
                       options.add_extra_token ? 1 : 0, options.drop_last_partial_sequence);

  const IndexArray document_index = read_npy(document_path);
  check_array(document_path, document_index, IndexDtype::kInt32, {documents});
  check_range(document_path, document_index, 0, 1,
              static_cast<std::int64_t>(sequence_lengths.size()), "sequence ids");
  const auto ids = document_index.values<std::int32_t>();
  out.document_index.assign(ids.begin(), ids.end());

  out.sample_index = read_npy(sample_path);
  check_array(sample_path, out.sample_index, sample_index_dtype(documents, sequence_lengths),
              {static_cast<std::size_t>(samples + 1), 2});
  check_range(sample_path, out.sample_index, 0, 2, static_cast<std::int64_t>(documents),
              "document positions");

  out.shuffle_index = read_npy(shuffle_path);
  check_array(shuffle_path, out.shuffle_index, shuffle_index_dtype(samples),
              {static_cast<std::size_t>(samples)});
  check_range(shuffle_path, out.shuffle_index, 0, 1, samples, "sample numbers");
  return out;
}

}  // namespace

std::string gpt_description(const GptDatasetIdentity& identity, const GptIndexOptions& options) {
  cache::Json description = cache::dataset_description("GPTDataset", identity, options.num_samples,
                                                       options.seed, options.sequence_length);
  if (!options.add_extra_token) description["add_extra_token_to_sequence"] = false;
  if (!options.drop_last_partial_sequence) description["drop_last_partial_sequence"] = false;
  return cache::dump(description);
}

std::string description_md5(std::string_view description) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(description.data(), description.size(), digest, &length, EVP_md5(), nullptr) !=
      1) {
    throw Error("OpenSSL could not compute the MD5 of a dataset description");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

fs::path default_gpt_cache_dir(const std::string& dataset_path) {
  return fs::path(dataset_path) / "cache" / "GPTDataset_indices";
}

GptIndices load_or_build_gpt_indices(const fs::path& cache_dir, const GptDatasetIdentity& identity,
                                     std::span<const std::int32_t> sequence_ids,
                                     std::span<const std::int32_t> sequence_lengths,
                                     const GptIndexOptions& options, bool* built) {
  const std::string description = gpt_description(identity, options);
  const std::string base =
      description_md5(description) + "-GPTDataset-" + std::string(split_name(identity.split)) + "-";
  const fs::path description_path = cache_dir / (base + "description.txt");
  const fs::path document_path = cache_dir / (base + "document_index.npy");
  const fs::path sample_path = cache_dir / (base + "sample_index.npy");
  const fs::path shuffle_path = cache_dir / (base + "shuffle_index.npy");

  const bool complete = fs::is_regular_file(description_path) &&
                        fs::is_regular_file(document_path) && fs::is_regular_file(sample_path) &&
                        fs::is_regular_file(shuffle_path);
  // Files under this name but with another description are stale (or an MD5 collision): rebuilt.
  if (complete && cache::read_text(description_path) == description) {
    if (built) *built = false;
    return validated(document_path, sample_path, shuffle_path, sequence_ids, sequence_lengths,
                     options);
  }

  GptIndices indices = build_gpt_indices(sequence_ids, sequence_lengths, options);
  std::error_code error;
  fs::create_directories(cache_dir, error);
  if (error) {
    throw Error(cache_dir.string() +
                ": cannot create the dataset index cache folder: " + error.message());
  }
  const IndexArray document_index(indices.document_index, {indices.document_index.size()});
  cache::write_atomically(document_path, [&](const fs::path& p) { write_npy(p, document_index); });
  cache::write_atomically(sample_path,
                          [&](const fs::path& p) { write_npy(p, indices.sample_index); });
  cache::write_atomically(shuffle_path,
                          [&](const fs::path& p) { write_npy(p, indices.shuffle_index); });
  cache::write_text_atomically(description_path, description);
  if (built) *built = true;
  return indices;
}

}  // namespace megatron::data
