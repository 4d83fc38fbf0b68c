// The typed values a validated config table holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace megatron::config {

using ConfigValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                                 std::vector<double>, std::vector<std::string>>;

// The kind a schema asks for. `path` and `path_list` hold strings that the loader resolves relative
// to the directory of the file that set them (so a config works from any working directory).
enum class ValueKind {
  boolean,
  integer,
  real,
  string,
  path,
  integer_list,
  real_list,
  string_list,
  path_list,
  // Megatron's --data-path list: ["prefix", ...] or [weight, "prefix", weight, "prefix", ...].
  // Held as strings: weights as numbers written out ("0.3"), prefixes resolved like paths.
  weighted_path_list
};

// "an integer", "a list of numbers", ... for error messages.
const char* describe_kind(ValueKind kind);

// A weighted_path_list read as Megatron's get_blend_from_list reads --data-path: when the list
// has an even length and every item at an even position (0, 2, ...) is a number, the list is
// [weight, path, weight, path, ...]; otherwise every item is a path.
struct WeightedPaths {
  std::vector<std::string> paths;
  std::vector<double> weights;  // empty when no weights are given
};
// The number a weight item holds (the whole text, as Python's float() reads it), or nothing.
std::optional<double> parse_weight(const std::string& item);
WeightedPaths split_weighted_paths(const std::vector<std::string>& items);

// The value as it would be written in TOML: 3, 0.0003, "cosine", [1, 2].
std::string format_value(const ConfigValue& value);

}  // namespace megatron::config
