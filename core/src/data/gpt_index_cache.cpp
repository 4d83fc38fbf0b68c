// GPTDataset index cache: Megatron's description JSON, its MD5, and the .npy files named after it.
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <system_error>

#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include "data/gpt_index_rules.h"
#include "megatron/data/gpt_indices.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

Json split_matrix_json(const SplitMatrix& matrix) {
  Json out = Json::array();
  for (std::size_t i = 0; i < matrix.size(); ++i) {
    if (!matrix[i]) {
      out.push_back(nullptr);
      continue;
    }
    // Megatron's cumulative sums start from the integer 0, which JSON prints without a fraction.
    const Json begin = i == 0 ? Json(0) : Json(matrix[i]->begin);
    out.push_back(Json::array({begin, matrix[i]->end}));
  }
  return out;
}

Json tokenizer_json(const TokenizerIdentity& tokenizer) {
  Json out = Json::object();
  out["class"] = tokenizer.class_name;
  out["tokenizer_path"] = tokenizer.paths;
  for (const auto& [key, value] : tokenizer.options)
    out[key] = value;
  return out;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open for reading");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Written under a temporary name and renamed, so a crash never leaves a half-written file under
// the name a later run trusts. The temporary name is unique to this writer (process id and a
// random tag): two jobs building the same cache at once each write their own file, and the
// renames, identical in content, replace each other atomically.
template <typename Write>
void write_atomically(const fs::path& path, Write write) {
  fs::path temporary = path;
  temporary += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(std::random_device{}());
  try {
    write(temporary);
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw Error(path.string() +
                ": cannot move the freshly written file into place: " + error.message());
  }
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

[[noreturn]] void refuse(const fs::path& path, const std::string& expected,
                         const std::string& found) {
  throw Error(path.string() + ": expected " + expected + ", found " + found +
              "; the dataset changed since this cache was written, or the file is damaged; "
              "delete the cache files to rebuild them");
}

void check_array(const fs::path& path, const IndexArray& array, IndexDtype dtype,
                 const std::vector<std::size_t>& shape) {
  if (array.dtype() != dtype || array.shape() != shape) {
    refuse(
        path,
        std::string("a ") + std::string(dtype_name(dtype)) + " array of shape " + shape_text(shape),
        std::string(dtype_name(array.dtype())) + " " + shape_text(array.shape()));
  }
}

void check_range(const fs::path& path, const IndexArray& array, std::size_t column,
                 std::size_t columns, std::int64_t end, const std::string& what) {
  for (std::size_t i = column; i < array.size(); i += columns) {
    const std::int64_t value = array[i];
    if (value < 0 || value >= end) {
      refuse(path, what + " in [0, " + std::to_string(end) + ")",
             std::to_string(value) + " at element " + std::to_string(i));
    }
  }
}

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
  Json description = Json::object();
  description["class"] = "GPTDataset";
  description["dataset_path"] = identity.dataset_path;
  description["num_samples"] = options.num_samples ? Json(*options.num_samples) : Json(nullptr);
  description["index_split"] = split_name(identity.split);
  description["random_seed"] = options.seed;
  description["sequence_length"] = options.sequence_length;
  description["split"] = identity.split_string ? Json(*identity.split_string) : Json(nullptr);
  description["split_matrix"] =
      identity.split_matrix ? split_matrix_json(*identity.split_matrix) : Json(nullptr);
  description["tokenizer"] = tokenizer_json(identity.tokenizer);
  if (!options.add_extra_token) description["add_extra_token_to_sequence"] = false;
  if (!options.drop_last_partial_sequence) description["drop_last_partial_sequence"] = false;
  // Python's json.dumps(indent=4) with its default ASCII escaping.
  return description.dump(4, ' ', true);
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
  if (complete && read_text(description_path) == description) {
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
  write_atomically(document_path, [&](const fs::path& p) { write_npy(p, document_index); });
  write_atomically(sample_path, [&](const fs::path& p) { write_npy(p, indices.sample_index); });
  write_atomically(shuffle_path, [&](const fs::path& p) { write_npy(p, indices.shuffle_index); });
  write_atomically(description_path, [&](const fs::path& p) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << description;
    out.close();
    if (!out) throw Error(p.string() + ": write failed");
  });
  if (built) *built = true;
  return indices;
}

}  // namespace megatron::data
