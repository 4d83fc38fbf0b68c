// A config as read from TOML (after `base =` inheritance and --set overrides), before validation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/config/location.h"

namespace megatron::config {

// One TOML value, detached from the parser so the TOML library stays out of the SDK headers.
struct RawValue {
  enum class Type { boolean, integer, real, string, array, table, date_time };
  Type type = Type::string;
  bool boolean = false;
  std::int64_t integer = 0;
  double real = 0.0;
  std::string string;
  std::vector<RawValue> items;  // array elements
  SourceLocation where;

  // "string \"abc\"", "integer 3", "array of 2", "table" for error messages.
  std::string describe() const;
};

struct RawTable {
  SourceLocation where;            // the [table] header (or first key)
  std::vector<std::string> order;  // keys in the order they were written
  std::map<std::string, RawValue, std::less<>> keys;
};

class RawConfig {
 public:
  // Reads `file`, following `base = "other.toml"` (relative to the including file) first so the
  // including file's keys win; a cycle of bases is a ConfigError listing the chain.
  static RawConfig load_file(const std::filesystem::path& file);
  // Parses TOML text (tests); `name` is used in locations.
  static RawConfig load_string(std::string_view toml_text, const std::string& name);

  // Applies "table.key=value"; the value is TOML ("3e-4", "\"cosine\"", "[1, 2]") or, if it does
  // not parse as TOML, a bare string ("cosine").
  void apply_override(std::string_view assignment);

  const std::map<std::string, RawTable, std::less<>>& tables() const { return tables_; }
  const RawTable* find(std::string_view table) const;
  // Every file read, the main file last.
  const std::vector<std::filesystem::path>& files() const { return files_; }
  const std::filesystem::path& main_file() const { return main_file_; }

 private:
  void merge_file(const std::filesystem::path& file, std::vector<std::filesystem::path>& chain);
  void merge_document(const void* toml_table, const std::string& file_name);

  std::map<std::string, RawTable, std::less<>> tables_;
  std::vector<std::filesystem::path> files_;
  std::filesystem::path main_file_;
};

}  // namespace megatron::config
