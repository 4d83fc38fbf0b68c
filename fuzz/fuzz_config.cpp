// libFuzzer target: TOML config text -> RawConfig -> validated Config (core schemas and a plugin
// schema using every key kind), then the printed config must read back to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "megatron/config/config.h"
#include "megatron/error.h"

namespace {

using namespace megatron::config;

// A plugin table exercising every kind of key, range and choice, and a cross-key rule.
TableSchema fuzz_model_keys() {
  TableSchema schema("model");
  schema.boolean("flag", false, "a boolean")
      .integer("layers", 2, "an integer >= 1", Range::at_least(1))
      .real("dropout", 0.1, "a real in [0, 1]", Range::between(0, 1))
      .string("activation", "gelu", "a choice", {"gelu", "swiglu", "relu"})
      .optional_integer("heads", "optional > 0", Range::positive())
      .optional_real("scale", "optional real")
      .optional_string("name", "optional string")
      .optional_path("file", "optional path")
      .optional_integer_list("pattern", "optional list", Range::at_least(0))
      .integer_list("sizes", {1, 2}, "a list of integers", Range::at_least(1))
      .real_list("weights", {0.5}, "a list of reals", Range::between(0, 1))
      .string_list("tags", {}, "a list of strings")
      .path_list("paths", "a list of paths")
      .optional_weighted_path_list("data", "Megatron's weighted path list")
      .rule([](const ConfigTable& t) {
        if (t.has("heads") && t.integer("layers") % t.integer("heads") != 0)
          t.fail("heads", "must divide layers");
      });
  return schema;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string printed;
  try {
    Config config = Config::from_raw(RawConfig::load_string(text, "fuzz.toml"));
    config.validate_plugin_table(plugin_table_schema("model", "fuzz", fuzz_model_keys()));
    printed = config.to_toml();
  } catch (const megatron::Error&) {
    return 0;  // refused with a message: the expected outcome for most inputs
  }
  // What --print-config shows (and checkpoints store) must load again and print the same.
  try {
    Config again = Config::from_raw(RawConfig::load_string(printed, "printed.toml"));
    again.validate_plugin_table(plugin_table_schema("model", "fuzz", fuzz_model_keys()));
    if (again.to_toml() != printed) std::abort();
  } catch (const megatron::Error&) {
    std::abort();  // an accepted config printed as text the loader refuses
  }
  return 0;
}
