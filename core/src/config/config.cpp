// Resolves a config: load, override, refuse unknown tables, validate core tables, print as TOML.
#include "megatron/config/config.h"

#include <algorithm>

#include "megatron/error.h"

namespace megatron::config {

namespace {

std::vector<const TableSchema*> core_schema_pointers() {
  std::vector<const TableSchema*> out;
  for (const auto& s : core_schemas())
    out.push_back(&s);
  return out;
}

void refuse_unknown_tables(const RawConfig& raw) {
  std::vector<std::string> known;
  for (const auto& s : core_schemas())
    known.push_back(s.table_name());
  for (const auto& n : plugin_table_names())
    known.push_back(n);
  for (const auto& [name, table] : raw.tables()) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string message = "unknown table [" + name + "]";
    const std::string guess = suggest(name, known);
    if (!guess.empty()) {
      message += "; did you mean [" + guess + "]?";
    } else {
      std::string list;
      for (const auto& k : known)
        list += (list.empty() ? "" : ", ") + ("[" + k + "]");
      message += " (known tables: " + list + ")";
    }
    const std::string at = table.where.known() ? table.where.to_string() + ": " : "";
    throw ConfigError(at + message);
  }
}

}  // namespace

Config Config::from_raw(RawConfig raw) {
  refuse_unknown_tables(raw);
  Config c;
  c.raw_ = std::move(raw);
  const auto others = core_schema_pointers();
  for (const auto& schema : core_schemas()) {
    c.tables_.push_back(validate_table(c.raw_.find(schema.table_name()), schema, others));
  }
  c.core_ = make_core_config(c.tables_);
  return c;
}

Config Config::load(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  RawConfig raw = RawConfig::load_file(file);
  for (const auto& o : overrides)
    raw.apply_override(o);
  return from_raw(std::move(raw));
}

bool Config::has_validated(std::string_view name) const {
  return std::any_of(tables_.begin(), tables_.end(),
                     [&](const ConfigTable& t) { return t.name() == name; });
}

const ConfigTable& Config::table(std::string_view name) const {
  for (const auto& t : tables_) {
    if (t.name() == name) return t;
  }
  throw Error("config table [" + std::string(name) + "] has not been validated");
}

const ConfigTable& Config::validate_plugin_table(const TableSchema& schema) {
  std::vector<const TableSchema*> others = core_schema_pointers();
  ConfigTable validated = validate_table(raw_.find(schema.table_name()), schema, others);
  auto it = std::find_if(tables_.begin(), tables_.end(),
                         [&](const ConfigTable& t) { return t.name() == schema.table_name(); });
  if (it != tables_.end()) {
    *it = std::move(validated);
    return *it;
  }
  tables_.push_back(std::move(validated));
  return tables_.back();
}

std::string Config::to_toml() const {
  std::string out;
  for (const auto& t : tables_) {
    if (!out.empty()) out += "\n";
    out += "[" + t.name() + "]\n";
    for (const auto& key : t.keys())
      out += key + " = " + format_value(t.value(key)) + "\n";
  }
  return out;
}

TableSchema plugin_table_schema(std::string_view table, std::string_view plugin_name,
                                const TableSchema& plugin_keys) {
  TableSchema s{std::string(table), plugin_keys.doc()};
  s.string("type", std::string(plugin_name), "name of the plugin that provides this table");
  for (const auto& k : plugin_keys.keys()) {
    if (k.name == "type") {
      throw PluginError("plugin '" + std::string(plugin_name) +
                        "' declares a key named `type` in [" + std::string(table) +
                        "], which is reserved for choosing the plugin");
    }
    s.add(k);
  }
  for (const auto& r : plugin_keys.rules())
    s.rule(r);
  return s;
}

}  // namespace megatron::config
