// A config table after validation: every key typed, ranged and located in its source file.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/config/location.h"
#include "megatron/config/schema.h"
#include "megatron/config/value.h"

namespace megatron::config {

class ConfigTable {
 public:
  struct Entry {
    ConfigValue value;
    SourceLocation where;  // empty file for a default
    bool from_default = false;
  };

  ConfigTable() = default;
  ConfigTable(std::string name, SourceLocation where);

  const std::string& name() const { return name_; }
  const SourceLocation& where() const { return where_; }

  // True when the key has a value (given, or defaulted); false for an absent optional key.
  bool has(std::string_view key) const;
  // True when the value came from the config file or a --set override rather than a default.
  bool is_set(std::string_view key) const;

  // Typed getters; asking for an absent key or the wrong kind is a programming error and throws
  // megatron::Error naming the key.
  bool boolean(std::string_view key) const;
  std::int64_t integer(std::string_view key) const;
  double real(std::string_view key) const;
  const std::string& string(std::string_view key) const;
  const std::vector<std::int64_t>& integer_list(std::string_view key) const;
  const std::vector<double>& real_list(std::string_view key) const;
  const std::vector<std::string>& string_list(std::string_view key) const;

  std::optional<std::int64_t> find_integer(std::string_view key) const;
  std::optional<double> find_real(std::string_view key) const;
  std::optional<std::string> find_string(std::string_view key) const;

  const ConfigValue& value(std::string_view key) const;
  // Where the value was written; for a defaulted key, where the table was (or nothing).
  SourceLocation where(std::string_view key) const;

  // Throws ConfigError "<file:line:col>: <table>.<key>: <message>".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;

  // Keys with values, in declaration order of the schema.
  const std::vector<std::string>& keys() const { return order_; }
  void set(std::string key, Entry entry);

 private:
  const Entry& entry(std::string_view key) const;

  std::string name_;
  SourceLocation where_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> order_;
};

}  // namespace megatron::config
