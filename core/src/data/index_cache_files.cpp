// The shared pieces of Megatron's dataset index caches: description fields, atomic writes and
// the refusal of cached arrays that do not fit the data.
#include "data/index_cache_files.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <system_error>

#include "megatron/data/split.h"
#include "megatron/error.h"

namespace megatron::data::cache {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

Json dataset_description(std::string_view class_name, const GptDatasetIdentity& identity,
                         std::optional<std::int64_t> num_samples, std::int64_t seed,
                         std::int64_t sequence_length) {
  Json description = Json::object();
  description["class"] = class_name;
  description["dataset_path"] = identity.dataset_path;
  description["num_samples"] = num_samples ? Json(*num_samples) : Json(nullptr);
  description["index_split"] = split_name(identity.split);
  description["random_seed"] = seed;
  description["sequence_length"] = sequence_length;
  description["split"] = identity.split_string ? Json(*identity.split_string) : Json(nullptr);
  description["split_matrix"] =
      identity.split_matrix ? split_matrix_json(*identity.split_matrix) : Json(nullptr);
  description["tokenizer"] = tokenizer_json(identity.tokenizer);
  return description;
}

std::string dump(const Json& description) {
  return description.dump(4, ' ', true);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open for reading");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_atomically(const fs::path& path, const std::function<void(const fs::path&)>& write) {
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

void write_text_atomically(const fs::path& path, const std::string& text) {
  write_atomically(path, [&](const fs::path& p) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw Error(p.string() + ": write failed");
  });
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

void refuse(const fs::path& path, const std::string& expected, const std::string& found) {
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

}  // namespace megatron::data::cache
