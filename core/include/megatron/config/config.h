// The whole resolved config: TOML files + overrides, core tables validated, plugin tables added
// as their plugins' schemas become known.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/config/core_config.h"
#include "megatron/config/raw_config.h"
#include "megatron/config/table.h"
#include "megatron/config/validate.h"

namespace megatron::config {

class Config {
 public:
  // Reads `file` (following `base`), applies each "table.key=value" override in order, refuses
  // unknown tables and validates the core tables. Throws ConfigError.
  static Config load(const std::filesystem::path& file, const std::vector<std::string>& overrides);
  // The same checks on an already-read config (tests, `load_string`). With no file, every core
  // table takes its defaults.
  static Config from_raw(RawConfig raw);

  const RawConfig& raw() const { return raw_; }
  const CoreConfig& core() const { return core_; }

  // A validated table (core tables always; plugin tables after validate_plugin_table).
  const ConfigTable& table(std::string_view name) const;
  bool has_validated(std::string_view name) const;

  // Validates a plugin-selected table ([model], [optimizer], [data], [task]) with the plugin's
  // schema, to which `type` has been added, and keeps it for printing. Returns the stored table.
  const ConfigTable& validate_plugin_table(const TableSchema& plugin_schema);

  // Every table as TOML, defaults included: what --print-config shows and checkpoints store.
  std::string to_toml() const;

 private:
  RawConfig raw_;
  std::vector<ConfigTable> tables_;
  CoreConfig core_;
};

// The schema a plugin's table is validated with: `type` (naming the plugin) plus the plugin's keys.
TableSchema plugin_table_schema(std::string_view table, std::string_view plugin_name,
                                const TableSchema& plugin_keys);

}  // namespace megatron::config
