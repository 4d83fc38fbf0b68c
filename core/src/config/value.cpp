// Describes and prints config values for messages and --print-config.
#include "megatron/config/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace megatron::config {

const char* describe_kind(ValueKind kind) {
  switch (kind) {
    case ValueKind::boolean:
      return "a boolean (true or false)";
    case ValueKind::integer:
      return "an integer";
    case ValueKind::real:
      return "a number";
    case ValueKind::string:
      return "a string";
    case ValueKind::path:
      return "a path (string)";
    case ValueKind::integer_list:
      return "a list of integers";
    case ValueKind::real_list:
      return "a list of numbers";
    case ValueKind::string_list:
      return "a list of strings";
    case ValueKind::path_list:
      return "a list of paths (strings)";
    case ValueKind::weighted_path_list:
      return "a list of paths, or of weights and paths: [weight, \"path\", weight, \"path\", ...]";
  }
  return "a value";
}

std::optional<double> parse_weight(const std::string& item) {
  // Python's float(): surrounding whitespace and a leading '+' are allowed.
  std::size_t begin = item.find_first_not_of(" \t\n\r\f\v");
  if (begin == std::string::npos) return std::nullopt;
  const std::size_t end = item.find_last_not_of(" \t\n\r\f\v") + 1;
  if (item[begin] == '+' && end - begin > 1 && item[begin + 1] != '-') ++begin;
  double value = 0;
  const auto [stop, error] = std::from_chars(item.data() + begin, item.data() + end, value);
  if (error != std::errc() || stop != item.data() + end) return std::nullopt;
  return value;
}

WeightedPaths split_weighted_paths(const std::vector<std::string>& items) {
  WeightedPaths out;
  bool weighted = !items.empty() && items.size() % 2 == 0;
  for (std::size_t i = 0; weighted && i < items.size(); i += 2)
    weighted = parse_weight(items[i]).has_value();
  if (!weighted) {
    out.paths = items;
    return out;
  }
  for (std::size_t i = 0; i < items.size(); i += 2) {
    out.weights.push_back(*parse_weight(items[i]));
    out.paths.push_back(items[i + 1]);
  }
  return out;
}

namespace {

std::string format_real(double v) {
  // Shortest text that reads back as the same double, and always looks like a TOML float.
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string. (toml++'s own printer prefers 'literal' strings; users expect "quotes".)
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

template <typename T, typename F>
std::string format_list(const std::vector<T>& items, F&& format_one) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += format_one(items[i]);
  }
  return out + "]";
}

}  // namespace

std::string format_value(const ConfigValue& value) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return format_real(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<std::int64_t>& v) const {
      return format_list(v, [](std::int64_t i) { return std::to_string(i); });
    }
    std::string operator()(const std::vector<double>& v) const {
      return format_list(v, format_real);
    }
    std::string operator()(const std::vector<std::string>& v) const {
      return format_list(v, quote);
    }
  };
  return std::visit(Visitor{}, value);
}

}  // namespace megatron::config
