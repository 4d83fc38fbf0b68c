// Declares the keys of one config table: kind, default, range, choices, documentation, rules.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "megatron/config/value.h"

namespace megatron::config {

class ConfigTable;

// Inclusive bounds unless marked exclusive; applies to integers, reals and every element of lists.
struct Range {
  std::optional<double> min;
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;

  static Range at_least(double v) { return {v, std::nullopt, false, false}; }
  static Range positive() { return {0.0, std::nullopt, true, false}; }
  static Range between(double lo, double hi) { return {lo, hi, false, false}; }
  bool contains(double v) const;
  std::string describe() const;  // ">= 1", "in [0, 1]", "> 0"
};

enum class Presence {
  defaulted,  // absent means the default value
  optional,   // absent means "not set"; ConfigTable::has() is false
  required    // absent is an error
};

struct KeySpec {
  std::string name;
  ValueKind kind = ValueKind::string;
  Presence presence = Presence::defaulted;
  ConfigValue default_value;
  Range range;
  std::vector<std::string> choices;  // for strings: the allowed values
  std::string doc;
};

// A rule relating several keys of one table, checked after every key is valid on its own.
// It reports a violation by calling ConfigTable::fail(key, message).
using TableRule = std::function<void(const ConfigTable&)>;

class TableSchema {
 public:
  explicit TableSchema(std::string table_name, std::string doc = {});

  TableSchema& boolean(std::string name, bool fallback, std::string doc);
  TableSchema& integer(std::string name, std::int64_t fallback, std::string doc, Range range = {});
  TableSchema& real(std::string name, double fallback, std::string doc, Range range = {});
  TableSchema& string(std::string name, std::string fallback, std::string doc,
                      std::vector<std::string> choices = {});
  // Keys that may be absent altogether (ConfigTable::has() tells).
  TableSchema& optional_integer(std::string name, std::string doc, Range range = {});
  TableSchema& optional_real(std::string name, std::string doc, Range range = {});
  TableSchema& optional_string(std::string name, std::string doc,
                               std::vector<std::string> choices = {});
  TableSchema& optional_path(std::string name, std::string doc);
  TableSchema& optional_integer_list(std::string name, std::string doc, Range range = {});
  TableSchema& required_string(std::string name, std::string doc,
                               std::vector<std::string> choices = {});
  TableSchema& integer_list(std::string name, std::vector<std::int64_t> fallback, std::string doc,
                            Range range = {});
  TableSchema& real_list(std::string name, std::vector<double> fallback, std::string doc,
                         Range range = {});
  TableSchema& string_list(std::string name, std::vector<std::string> fallback, std::string doc);
  TableSchema& path_list(std::string name, std::string doc);
  // Megatron's --data-path: ["prefix", ...] or [weight, "prefix", ...]; may be absent.
  TableSchema& optional_weighted_path_list(std::string name, std::string doc);
  TableSchema& rule(TableRule rule);

  // Adds a fully specified key; throws megatron::Error if the name is already declared.
  TableSchema& add(KeySpec spec);

  const std::string& table_name() const { return table_name_; }
  const std::string& doc() const { return doc_; }
  const std::vector<KeySpec>& keys() const { return keys_; }
  const std::vector<TableRule>& rules() const { return rules_; }
  const KeySpec* find(std::string_view name) const;

  // For a plugin reusing keys declared by someone else (a model taking the shared [model] keys of
  // nn::declare_model_config with its own defaults): gives declared key `name` a new default,
  // making it defaulted. Throws Error when the key is not declared or `value` is not of its kind
  // (or, for a key with choices, not one of them).
  TableSchema& set_default(std::string_view name, ConfigValue value);
  // Replaces a declared string key's choices (a plugin narrows the shared ones, or adds its own:
  // T5's `relative` positions); they must include its default. New documentation when `doc` is
  // not empty. Throws Error like set_default.
  TableSchema& set_choices(std::string_view name, std::vector<std::string> choices,
                           std::string doc = {});

 private:
  KeySpec& declared(std::string_view name, const char* what);
  std::string table_name_;
  std::string doc_;
  std::vector<KeySpec> keys_;
  std::vector<TableRule> rules_;
};

}  // namespace megatron::config
