// Typed access to a validated config table, and errors that point back into the config file.
#include "megatron/config/table.h"

#include "megatron/error.h"

namespace megatron::config {

ConfigTable::ConfigTable(std::string name, SourceLocation where)
    : name_(std::move(name)), where_(std::move(where)) {}

bool ConfigTable::has(std::string_view key) const {
  return entries_.find(key) != entries_.end();
}

bool ConfigTable::is_set(std::string_view key) const {
  auto it = entries_.find(key);
  return it != entries_.end() && !it->second.from_default;
}

void ConfigTable::set(std::string key, Entry entry) {
  auto [it, inserted] = entries_.insert_or_assign(key, std::move(entry));
  if (inserted) order_.push_back(std::move(key));
}

const ConfigTable::Entry& ConfigTable::entry(std::string_view key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    throw Error("config key " + name_ + "." + std::string(key) + " was read but has no value");
  }
  return it->second;
}

const ConfigValue& ConfigTable::value(std::string_view key) const {
  return entry(key).value;
}

namespace {
template <typename T>
const T& get_as(const ConfigTable& table, std::string_view key, const ConfigValue& v,
                const char* wanted) {
  if (const T* p = std::get_if<T>(&v)) return *p;
  throw Error("config key " + table.name() + "." + std::string(key) + " was read as " + wanted +
              " but the schema declares another kind");
}
}  // namespace

bool ConfigTable::boolean(std::string_view key) const {
  return get_as<bool>(*this, key, value(key), "a boolean");
}
std::int64_t ConfigTable::integer(std::string_view key) const {
  return get_as<std::int64_t>(*this, key, value(key), "an integer");
}
double ConfigTable::real(std::string_view key) const {
  return get_as<double>(*this, key, value(key), "a number");
}
const std::string& ConfigTable::string(std::string_view key) const {
  return get_as<std::string>(*this, key, value(key), "a string");
}
const std::vector<std::int64_t>& ConfigTable::integer_list(std::string_view key) const {
  return get_as<std::vector<std::int64_t>>(*this, key, value(key), "a list of integers");
}
const std::vector<double>& ConfigTable::real_list(std::string_view key) const {
  return get_as<std::vector<double>>(*this, key, value(key), "a list of numbers");
}
const std::vector<std::string>& ConfigTable::string_list(std::string_view key) const {
  return get_as<std::vector<std::string>>(*this, key, value(key), "a list of strings");
}

std::optional<std::int64_t> ConfigTable::find_integer(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return integer(key);
}
std::optional<double> ConfigTable::find_real(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return real(key);
}
std::optional<std::string> ConfigTable::find_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return string(key);
}

SourceLocation ConfigTable::where(std::string_view key) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.from_default) return where_;
  return it->second.where;
}

void ConfigTable::fail(std::string_view key, std::string_view message) const {
  const SourceLocation at = where(key);
  std::string text = at.known() ? at.to_string() + ": " : std::string();
  text += name_ + "." + std::string(key) + ": " + std::string(message);
  if (!is_set(key) && has(key)) text += " (this is the default value; set it explicitly)";
  throw ConfigError(text);
}

}  // namespace megatron::config
