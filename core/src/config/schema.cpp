// Builders for table schemas: each adds one declared key.
#include "megatron/config/schema.h"

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
