// Reads TOML config files into RawConfig: `base =` inheritance, --set overrides, source locations.
#include "megatron/config/raw_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "megatron/error.h"

namespace megatron::config {

namespace fs = std::filesystem;

std::string RawValue::describe() const {
  switch (type) {
    case Type::boolean:
      return std::string("boolean ") + (boolean ? "true" : "false");
    case Type::integer:
      return "integer " + std::to_string(integer);
    case Type::real: {
      std::ostringstream s;
      s << "number " << real;
      return s.str();
    }
    case Type::string:
      return "string \"" + string + "\"";
    case Type::array:
      return "a list of " + std::to_string(items.size()) + (items.size() == 1 ? " item" : " items");
    case Type::table:
      return "a table";
    case Type::date_time:
      return "a date/time";
  }
  return "a value";
}

namespace {

SourceLocation location_of(const toml::source_region& region, const std::string& file_name) {
  return {file_name, region.begin.line, region.begin.column};
}

RawValue convert(const toml::node& node, const std::string& file_name) {
  RawValue v;
  v.where = location_of(node.source(), file_name);
  switch (node.type()) {
    case toml::node_type::boolean:
      v.type = RawValue::Type::boolean;
      v.boolean = *node.value<bool>();
      break;
    case toml::node_type::integer:
      v.type = RawValue::Type::integer;
      v.integer = *node.value<std::int64_t>();
      break;
    case toml::node_type::floating_point:
      v.type = RawValue::Type::real;
      v.real = *node.value<double>();
      break;
    case toml::node_type::string:
      v.type = RawValue::Type::string;
      v.string = *node.value<std::string>();
      break;
    case toml::node_type::array:
      v.type = RawValue::Type::array;
      for (const auto& item : *node.as_array())
        v.items.push_back(convert(item, file_name));
      break;
    case toml::node_type::table:
      v.type = RawValue::Type::table;
      break;
    default:
      v.type = RawValue::Type::date_time;
      break;
  }
  return v;
}

[[noreturn]] void rethrow_parse_error(const toml::parse_error& e, const std::string& file_name) {
  const auto& b = e.source().begin;
  throw ConfigError(SourceLocation{file_name, b.line, b.column}.to_string() +
                    ": invalid TOML: " + std::string(e.description()));
}

std::string display_name(const fs::path& p) {
  return p.lexically_normal().string();
}

}  // namespace

const RawTable* RawConfig::find(std::string_view table) const {
  auto it = tables_.find(table);
  return it == tables_.end() ? nullptr : &it->second;
}

void RawConfig::merge_document(const void* doc_ptr, const std::string& file_name) {
  const auto& doc = *static_cast<const toml::table*>(doc_ptr);
  for (const auto& [key, node] : doc) {
    const std::string name(key.str());
    if (name == "base") continue;  // handled by merge_file
    const SourceLocation at = location_of(key.source(), file_name);
    const auto* table = node.as_table();
    if (!table) {
      throw ConfigError(at.to_string() + ": top-level key '" + name +
                        "' must be inside a table such as [training] or [model] "
                        "(only `base` may stand at the top level)");
    }
    RawTable& target = tables_[name];
    if (!target.where.known() || target.where.file != file_name) target.where = at;
    for (const auto& [sub_key, sub_node] : *table) {
      const std::string sub(sub_key.str());
      if (!target.keys.contains(sub)) target.order.push_back(sub);
      target.keys.insert_or_assign(sub, convert(sub_node, file_name));
    }
  }
}

void RawConfig::merge_file(const fs::path& file, std::vector<fs::path>& chain) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(file, ec);
  const fs::path id = ec ? file : canonical;
  if (std::find(chain.begin(), chain.end(), id) != chain.end()) {
    std::string cycle;
    for (const auto& p : chain)
      cycle += display_name(p) + " -> ";
    throw ConfigError(display_name(file) + ": `base` inheritance forms a cycle: " + cycle +
                      display_name(id));
  }
  if (!fs::exists(file)) {
    std::string via =
        chain.empty() ? "" : " (named as `base` in " + display_name(chain.back()) + ")";
    throw ConfigError("config file " + display_name(file) + " does not exist" + via);
  }
  if (fs::is_directory(file)) {
    throw ConfigError("config file " + display_name(file) + " is a directory, not a TOML file");
  }
  const std::string file_name = display_name(file);
  toml::table doc;
  try {
    doc = toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    rethrow_parse_error(e, file_name);
  }
  chain.push_back(id);
  if (const auto* base = doc.get("base")) {
    const auto at = location_of(base->source(), file_name);
    const auto base_name = base->value<std::string>();
    if (!base_name) {
      throw ConfigError(at.to_string() + ": base: expected a path (string) to another TOML file");
    }
    merge_file(file.parent_path() / *base_name, chain);
  }
  chain.pop_back();
  merge_document(&doc, file_name);
  files_.push_back(file);
}

RawConfig RawConfig::load_file(const fs::path& file) {
  RawConfig raw;
  std::vector<fs::path> chain;
  raw.merge_file(file, chain);
  raw.main_file_ = file;
  return raw;
}

RawConfig RawConfig::load_string(std::string_view toml_text, const std::string& name) {
  RawConfig raw;
  toml::table doc;
  try {
    doc = toml::parse(toml_text, name);
  } catch (const toml::parse_error& e) {
    rethrow_parse_error(e, name);
  }
  if (doc.contains("base")) {
    throw ConfigError(name + ": `base` is only supported in config files");
  }
  raw.merge_document(&doc, name);
  raw.main_file_ = name;
  return raw;
}

void RawConfig::apply_override(std::string_view assignment) {
  const std::string origin = "--set " + std::string(assignment);
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    throw ConfigError(origin + ": expected table.key=value (for example --set training.lr=3e-4)");
  }
  const std::string path(assignment.substr(0, eq));
  const std::string text(assignment.substr(eq + 1));
  const auto dot = path.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == path.size()) {
    throw ConfigError(origin + ": '" + path +
                      "' is not a key path; write table.key, for example training.lr");
  }
  const std::string table = path.substr(0, dot);
  const std::string key = path.substr(dot + 1);
  if (table.find('.') != std::string::npos) {
    throw ConfigError(origin + ": '" + path + "' has nested tables; keys are table.key");
  }

  RawValue value;
  try {
    const toml::table doc = toml::parse("v = " + text, origin);
    value = convert(*doc.get("v"), origin);
  } catch (const toml::parse_error&) {
    // Not TOML: take it as a bare string, so --set model.type=gpt works without shell quoting.
    value.type = RawValue::Type::string;
    value.string = text;
  }
  value.where = SourceLocation{origin, 0, 0};
  if (value.type == RawValue::Type::array) {
    for (auto& item : value.items)
      item.where = value.where;
  }
  RawTable& target = tables_[table];
  if (!target.where.known()) target.where = value.where;
  if (!target.keys.contains(key)) target.order.push_back(key);
  target.keys.insert_or_assign(key, std::move(value));
}

}  // namespace megatron::config
