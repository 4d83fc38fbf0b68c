// Builders for table schemas: each adds one declared key.
#include "megatron/config/schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "megatron/error.h"

namespace megatron::config {

bool Range::contains(double v) const {
  if (std::isnan(v)) return !min && !max;
  if (min && (min_exclusive ? !(v > *min) : !(v >= *min))) return false;
  if (max && (max_exclusive ? !(v < *max) : !(v <= *max))) return false;
  return true;
}

namespace {
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

std::string Range::describe() const {
  if (min && max) {
    return std::string("in ") + (min_exclusive ? "(" : "[") + number(*min) + ", " + number(*max) +
           (max_exclusive ? ")" : "]");
  }
  if (min) return (min_exclusive ? "> " : ">= ") + number(*min);
  if (max) return (max_exclusive ? "< " : "<= ") + number(*max);
  return "any value";
}

TableSchema::TableSchema(std::string table_name, std::string doc)
    : table_name_(std::move(table_name)), doc_(std::move(doc)) {}

TableSchema& TableSchema::add(KeySpec spec) {
  if (find(spec.name)) {
    throw Error("schema of [" + table_name_ + "] declares key '" + spec.name + "' twice");
  }
  keys_.push_back(std::move(spec));
  return *this;
}

const KeySpec* TableSchema::find(std::string_view name) const {
  for (const auto& k : keys_) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

namespace {

// Whether `value` holds what a key of `kind` holds.
bool holds_kind(const ConfigValue& value, ValueKind kind) {
  switch (kind) {
    case ValueKind::boolean:
      return std::holds_alternative<bool>(value);
    case ValueKind::integer:
      return std::holds_alternative<std::int64_t>(value);
    case ValueKind::real:
      return std::holds_alternative<double>(value);
    case ValueKind::string:
    case ValueKind::path:
      return std::holds_alternative<std::string>(value);
    case ValueKind::integer_list:
      return std::holds_alternative<std::vector<std::int64_t>>(value);
    case ValueKind::real_list:
      return std::holds_alternative<std::vector<double>>(value);
    case ValueKind::string_list:
    case ValueKind::path_list:
    case ValueKind::weighted_path_list:
      return std::holds_alternative<std::vector<std::string>>(value);
  }
  return false;
}

bool is_choice(const KeySpec& key, const ConfigValue& value) {
  if (key.choices.empty()) return true;
  const auto* text = std::get_if<std::string>(&value);
  return text && std::find(key.choices.begin(), key.choices.end(), *text) != key.choices.end();
}

}  // namespace

KeySpec& TableSchema::declared(std::string_view name, const char* what) {
  for (auto& k : keys_) {
    if (k.name == name) return k;
  }
  throw Error(std::string(what) + ": the schema of [" + table_name_ + "] declares no key '" +
              std::string(name) + "'");
}

TableSchema& TableSchema::set_default(std::string_view name, ConfigValue value) {
  KeySpec& key = declared(name, "set_default");
  if (!holds_kind(value, key.kind)) {
    throw Error("set_default: key '" + key.name + "' of [" + table_name_ + "] holds " +
                describe_kind(key.kind) + "; the new default is not one");
  }
  if (!is_choice(key, value)) {
    throw Error("set_default: the new default of '" + key.name + "' in [" + table_name_ +
                "] is not one of its choices");
  }
  key.presence = Presence::defaulted;
  key.default_value = std::move(value);
  return *this;
}

TableSchema& TableSchema::set_choices(std::string_view name, std::vector<std::string> choices,
                                      std::string doc) {
  KeySpec& key = declared(name, "set_choices");
  if (key.kind != ValueKind::string) {
    throw Error("set_choices: key '" + key.name + "' of [" + table_name_ + "] is not a string key");
  }
  KeySpec narrowed = key;
  narrowed.choices = std::move(choices);
  if (key.presence == Presence::defaulted && !is_choice(narrowed, key.default_value)) {
    throw Error("set_choices: the default of '" + key.name + "' in [" + table_name_ +
                "] is not among the new choices");
  }
  if (!doc.empty()) narrowed.doc = std::move(doc);
  key = std::move(narrowed);
  return *this;
}

TableSchema& TableSchema::boolean(std::string name, bool fallback, std::string doc) {
  return add(
      {std::move(name), ValueKind::boolean, Presence::defaulted, fallback, {}, {}, std::move(doc)});
}

TableSchema& TableSchema::integer(std::string name, std::int64_t fallback, std::string doc,
                                  Range range) {
  return add({std::move(name),
              ValueKind::integer,
              Presence::defaulted,
              fallback,
              range,
              {},
              std::move(doc)});
}

TableSchema& TableSchema::real(std::string name, double fallback, std::string doc, Range range) {
  return add(
      {std::move(name), ValueKind::real, Presence::defaulted, fallback, range, {}, std::move(doc)});
}

TableSchema& TableSchema::string(std::string name, std::string fallback, std::string doc,
                                 std::vector<std::string> choices) {
  return add({std::move(name),
              ValueKind::string,
              Presence::defaulted,
              std::move(fallback),
              {},
              std::move(choices),
              std::move(doc)});
}

TableSchema& TableSchema::optional_integer(std::string name, std::string doc, Range range) {
  return add({std::move(name),
              ValueKind::integer,
              Presence::optional,
              std::int64_t{0},
              range,
              {},
              std::move(doc)});
}

TableSchema& TableSchema::optional_real(std::string name, std::string doc, Range range) {
  return add(
      {std::move(name), ValueKind::real, Presence::optional, 0.0, range, {}, std::move(doc)});
}

TableSchema& TableSchema::optional_string(std::string name, std::string doc,
                                          std::vector<std::string> choices) {
  return add({std::move(name),
              ValueKind::string,
              Presence::optional,
              std::string{},
              {},
              std::move(choices),
              std::move(doc)});
}

TableSchema& TableSchema::optional_path(std::string name, std::string doc) {
  return add({std::move(name),
              ValueKind::path,
              Presence::optional,
              std::string{},
              {},
              {},
              std::move(doc)});
}

TableSchema& TableSchema::optional_integer_list(std::string name, std::string doc, Range range) {
  return add({std::move(name),
              ValueKind::integer_list,
              Presence::optional,
              std::vector<std::int64_t>{},
              range,
              {},
              std::move(doc)});
}

TableSchema& TableSchema::required_string(std::string name, std::string doc,
                                          std::vector<std::string> choices) {
  return add({std::move(name),
              ValueKind::string,
              Presence::required,
              std::string{},
              {},
              std::move(choices),
              std::move(doc)});
}

TableSchema& TableSchema::integer_list(std::string name, std::vector<std::int64_t> fallback,
                                       std::string doc, Range range) {
  return add({std::move(name),
              ValueKind::integer_list,
              Presence::defaulted,
              std::move(fallback),
              range,
              {},
              std::move(doc)});
}

TableSchema& TableSchema::real_list(std::string name, std::vector<double> fallback, std::string doc,
                                    Range range) {
  return add({std::move(name),
              ValueKind::real_list,
              Presence::defaulted,
              std::move(fallback),
              range,
              {},
              std::move(doc)});
}

TableSchema& TableSchema::string_list(std::string name, std::vector<std::string> fallback,
                                      std::string doc) {
  return add({std::move(name),
              ValueKind::string_list,
              Presence::defaulted,
              std::move(fallback),
              {},
              {},
              std::move(doc)});
}

TableSchema& TableSchema::path_list(std::string name, std::string doc) {
  return add({std::move(name),
              ValueKind::path_list,
              Presence::defaulted,
              std::vector<std::string>{},
              {},
              {},
              std::move(doc)});
}

TableSchema& TableSchema::optional_weighted_path_list(std::string name, std::string doc) {
  return add({std::move(name),
              ValueKind::weighted_path_list,
              Presence::optional,
              std::vector<std::string>{},
              {},
              {},
              std::move(doc)});
}

TableSchema& TableSchema::rule(TableRule rule) {
  rules_.push_back(std::move(rule));
  return *this;
}

}  // namespace megatron::config
