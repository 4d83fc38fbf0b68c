// Validates raw config tables against schemas, with "did you mean" suggestions for typos.
#include "megatron/config/validate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "megatron/error.h"

namespace megatron::config {

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const std::size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
      diagonal = above;
    }
  }
  return row[b.size()];
}

[[noreturn]] void fail_at(const SourceLocation& at, const std::string& key_path,
                          const std::string& message) {
  std::string text = at.known() ? at.to_string() + ": " : std::string();
  throw ConfigError(text + key_path + ": " + message);
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

std::string resolve_path(const std::string& text, const SourceLocation& where) {
  namespace fs = std::filesystem;
  if (text.empty()) return text;
  fs::path p(text);
  if (p.is_absolute()) return p.lexically_normal().string();
  // Relative paths in a file are relative to that file; on the command line, to the working dir.
  if (where.line > 0) return (fs::path(where.file).parent_path() / p).lexically_normal().string();
  return fs::absolute(p).lexically_normal().string();
}

class KeyChecker {
 public:
  KeyChecker(const KeySpec& spec, std::string key_path) : spec_(spec), path_(std::move(key_path)) {}

  ConfigValue check(const RawValue& raw) const {
    switch (spec_.kind) {
      case ValueKind::boolean:
        if (raw.type != RawValue::Type::boolean) wrong_kind(raw);
        return raw.boolean;
      case ValueKind::integer:
        return integer(raw);
      case ValueKind::real:
        return real(raw);
      case ValueKind::string:
        return string(raw);
      case ValueKind::path:
        if (raw.type != RawValue::Type::string) wrong_kind(raw);
        return resolve_path(raw.string, raw.where);
      case ValueKind::integer_list: {
        std::vector<std::int64_t> out;
        for (const auto& item : list(raw))
          out.push_back(integer(item));
        return out;
      }
      case ValueKind::real_list: {
        std::vector<double> out;
        for (const auto& item : list(raw))
          out.push_back(real(item));
        return out;
      }
      case ValueKind::string_list: {
        std::vector<std::string> out;
        for (const auto& item : list(raw))
          out.push_back(string(item));
        return out;
      }
      case ValueKind::path_list: {
        std::vector<std::string> out;
        for (const auto& item : list(raw)) {
          if (item.type != RawValue::Type::string) wrong_element(item);
          out.push_back(resolve_path(item.string, item.where));
        }
        return out;
      }
      case ValueKind::weighted_path_list:
        return weighted_paths(raw);
    }
    wrong_kind(raw);
  }

 private:
  [[noreturn]] void wrong_kind(const RawValue& raw) const {
    fail_at(raw.where, path_,
            std::string("expected ") + describe_kind(spec_.kind) + ", got " + raw.describe());
  }
  [[noreturn]] void wrong_element(const RawValue& item) const {
    fail_at(item.where, path_,
            std::string("expected ") + describe_kind(spec_.kind) + ", but an item is " +
                item.describe());
  }
  bool in_list() const {
    return spec_.kind == ValueKind::integer_list || spec_.kind == ValueKind::real_list ||
           spec_.kind == ValueKind::string_list || spec_.kind == ValueKind::path_list ||
           spec_.kind == ValueKind::weighted_path_list;
  }

  std::string path_item(const RawValue& item) const {
    if (item.string.empty()) fail_at(item.where, path_, "a path is empty");
    return resolve_path(item.string, item.where);
  }

  // Megatron's --data-path: paths, or weights and paths alternating (split_weighted_paths tells
  // which). Weights are kept as numbers written out, paths are resolved; a lone string is a list
  // of one path.
  std::vector<std::string> weighted_paths(const RawValue& raw) const {
    if (raw.type == RawValue::Type::string) return {path_item(raw)};
    const std::vector<RawValue>& items = list(raw);
    if (items.empty()) fail_at(raw.where, path_, "expected at least one path");
    std::vector<std::string> text;
    for (const auto& item : items) {
      if (item.type == RawValue::Type::string) {
        text.push_back(item.string);
      } else if (item.type == RawValue::Type::integer) {
        text.push_back(std::to_string(item.integer));
      } else if (item.type == RawValue::Type::real) {
        text.push_back(format_value(item.real));
      } else {
        wrong_element(item);
      }
    }
    const WeightedPaths split = split_weighted_paths(text);
    std::vector<std::string> out = text;
    if (split.weights.empty()) {
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (items[i].type != RawValue::Type::string) {
          fail_at(items[i].where, path_,
                  "item " + std::to_string(i + 1) + " is " + items[i].describe() +
                      ", but the list is not [weight, \"path\", weight, \"path\", ...] (an even "
                      "number of items with a number first in each pair)");
        }
        out[i] = path_item(items[i]);
      }
      return out;
    }
    for (std::size_t i = 0; i < items.size(); i += 2) {
      const double weight = split.weights[i / 2];
      if (!std::isfinite(weight) || !(weight > 0)) {
        fail_at(items[i].where, path_,
                "weight " + text[i] + " of \"" + text[i + 1] + "\" must be a finite number > 0");
      }
      if (items[i + 1].type != RawValue::Type::string) {
        fail_at(items[i + 1].where, path_,
                "expected a path after weight " + text[i] + ", got " + items[i + 1].describe());
      }
      out[i + 1] = path_item(items[i + 1]);
    }
    return out;
  }

  const std::vector<RawValue>& list(const RawValue& raw) const {
    if (raw.type != RawValue::Type::array) wrong_kind(raw);
    return raw.items;
  }

  void check_range(double v, const RawValue& raw, const std::string& shown) const {
    if (!spec_.range.contains(v)) {
      fail_at(raw.where, path_,
              "value " + shown + " is out of range: must be " + spec_.range.describe());
    }
  }

  std::int64_t integer(const RawValue& raw) const {
    if (raw.type != RawValue::Type::integer) {
      if (in_list()) wrong_element(raw);
      wrong_kind(raw);
    }
    check_range(static_cast<double>(raw.integer), raw, std::to_string(raw.integer));
    return raw.integer;
  }

  double real(const RawValue& raw) const {
    double v = 0;
    if (raw.type == RawValue::Type::real) {
      v = raw.real;
    } else if (raw.type == RawValue::Type::integer) {
      v = static_cast<double>(raw.integer);
    } else {
      if (in_list()) wrong_element(raw);
      wrong_kind(raw);
    }
    if (!std::isfinite(v)) fail_at(raw.where, path_, "value must be a finite number");
    check_range(v, raw, format_value(v));
    return v;
  }

  std::string string(const RawValue& raw) const {
    if (raw.type != RawValue::Type::string) {
      if (in_list()) wrong_element(raw);
      wrong_kind(raw);
    }
    if (!spec_.choices.empty() &&
        std::find(spec_.choices.begin(), spec_.choices.end(), raw.string) == spec_.choices.end()) {
      std::string message = "\"" + raw.string + "\" is not one of: " + join(spec_.choices, ", ");
      const std::string guess = suggest(raw.string, spec_.choices);
      if (!guess.empty()) message += "; did you mean \"" + guess + "\"?";
      fail_at(raw.where, path_, message);
    }
    return raw.string;
  }

  const KeySpec& spec_;
  std::string path_;
};

std::vector<std::string> key_names(const TableSchema& schema) {
  std::vector<std::string> names;
  for (const auto& k : schema.keys())
    names.push_back(k.name);
  return names;
}

}  // namespace

std::string suggest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // Allow about one edit per three letters, and at least two, so short keys still get suggestions.
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  return best_distance <= limit ? best : std::string();
}

ConfigTable validate_table(const RawTable* raw, const TableSchema& schema,
                           const std::vector<const TableSchema*>& others) {
  const std::string& table = schema.table_name();
  ConfigTable out(table, raw ? raw->where : SourceLocation{});

  if (raw) {
    const std::vector<std::string> known = key_names(schema);
    for (const auto& key : raw->order) {
      if (schema.find(key)) continue;
      const RawValue& value = raw->keys.find(key)->second;
      std::string message = "unknown key in [" + table + "]";
      const std::string guess = suggest(key, known);
      if (!guess.empty()) {
        message += "; did you mean '" + guess + "'?";
      } else {
        std::vector<std::string> homes;
        for (const auto* other : others) {
          if (other != &schema && other->find(key))
            homes.push_back("[" + other->table_name() + "]");
        }
        if (!homes.empty()) {
          message += "; '" + key + "' belongs in " + join(homes, " or ");
        } else if (!known.empty()) {
          message += " (known keys: " + join(known, ", ") + ")";
        }
      }
      fail_at(value.where, table + "." + key, message);
    }
  }

  for (const auto& spec : schema.keys()) {
    const std::string key_path = table + "." + spec.name;
    const RawValue* given = nullptr;
    if (raw) {
      auto it = raw->keys.find(spec.name);
      if (it != raw->keys.end()) given = &it->second;
    }
    if (given) {
      out.set(spec.name, {KeyChecker(spec, key_path).check(*given), given->where, false});
    } else if (spec.presence == Presence::defaulted) {
      out.set(spec.name, {spec.default_value, {}, true});
    } else if (spec.presence == Presence::required) {
      std::string message = "required key is missing";
      if (!spec.doc.empty()) message += " (" + spec.doc + ")";
      if (!spec.choices.empty()) message += "; one of: " + join(spec.choices, ", ");
      fail_at(raw ? raw->where : SourceLocation{}, key_path, message);
    }
  }

  for (const auto& rule : schema.rules())
    rule(out);
  return out;
}

}  // namespace megatron::config
