// Where a config value came from (file:line:column, a --set override, or a default), for errors.
#pragma once

#include <cstdint>
#include <string>

namespace megatron::config {

struct SourceLocation {
  std::string file;        // config file path, or "--set table.key=value" for an override
  std::uint32_t line = 0;  // 1-based; 0 when unknown (defaults, overrides)
  std::uint32_t column = 0;

  bool known() const { return !file.empty(); }
  // "gpt.toml:12:7", "--set training.lr=abc", or "(default)".
  std::string to_string() const;
};

}  // namespace megatron::config
