// What Megatron's dataset index caches share, for GPTDataset and the masked datasets alike: the
// common fields of the description JSON, reading it back, atomic writes of the cache files, and
// the refusal of a cached array that does not fit the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "megatron/data/gpt_indices.h"
#include "megatron/data/npy.h"

namespace megatron::data::cache {

using Json = nlohmann::ordered_json;

// MegatronDataset.unique_identifiers up to the subclass's own key attributes: class,
// dataset_path, num_samples, index_split, random_seed, sequence_length, split, split_matrix,
// tokenizer, in that order.
Json dataset_description(std::string_view class_name, const GptDatasetIdentity& identity,
                         std::optional<std::int64_t> num_samples, std::int64_t seed,
                         std::int64_t sequence_length);
// Python's json.dumps(indent=4) with its default ASCII escaping.
std::string dump(const Json& description);

std::string read_text(const std::filesystem::path& path);

// Runs write(temporary) and renames the temporary file to `path`, so a crash never leaves a
// half-written file under the name a later run trusts. The temporary name is unique to this
// writer (process id and a random tag): two jobs building the same cache at once each write their
// own file, and the renames, identical in content, replace each other atomically.
void write_atomically(const std::filesystem::path& path,
                      const std::function<void(const std::filesystem::path&)>& write);
void write_text_atomically(const std::filesystem::path& path, const std::string& text);

// "(3,)" / "(2, 3)", as numpy prints shapes.
std::string shape_text(const std::vector<std::size_t>& shape);

// Throws the Error for a cache file whose content is not what this data and these options give.
[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& expected,
                         const std::string& found);
// Refuses `array` unless it has this dtype and shape.
void check_array(const std::filesystem::path& path, const IndexArray& array, IndexDtype dtype,
                 const std::vector<std::size_t>& shape);
// Refuses `array` unless every value of `column` (of `columns`) is in [0, end).
void check_range(const std::filesystem::path& path, const IndexArray& array, std::size_t column,
                 std::size_t columns, std::int64_t end, const std::string& what);

}  // namespace megatron::data::cache
