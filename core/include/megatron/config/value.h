// The typed values a validated config table holds.
#pragma once

#include <cstdint>
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
  path_list
};

// "an integer", "a list of numbers", ... for error messages.
const char* describe_kind(ValueKind kind);

// The value as it would be written in TOML: 3, 0.0003, "cosine", [1, 2].
std::string format_value(const ConfigValue& value);

}  // namespace megatron::config
