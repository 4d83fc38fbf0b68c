// The plugin ABI: the descriptor every plugin exports, the context it is created with, and the
// MEGATRON_PLUGIN macro. A plugin includes only SDK headers and links libmegatron_core.so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/dll/alias.hpp>

#include "megatron/batch.h"
#include "megatron/config/core_config.h"
#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/log.h"
#include "megatron/version.h"

namespace megatron {

class ParallelState;

// Which interface a plugin's create() returns, and which config table selects it by `type`.
enum class PluginKind : std::int32_t { model = 1, optimizer = 2, dataset = 3, task = 4 };

// "model", "optimizer", "dataset", "task"; "unknown" for any other value.
const char* plugin_kind_name(PluginKind kind);
// The config table whose `type` key selects a plugin of this kind: [model] [optimizer] [data]
// [task].
const char* plugin_kind_table(PluginKind kind);

// Base of every plugin object. Objects are destroyed before their library could be unloaded (the
// host never unloads during a run).
class Plugin {
 public:
  virtual ~Plugin();
};

// Services handed to a plugin when it is created (nothing is reached through globals).
// What a dataset plugin will produce, told from its validated table without opening any data
// file: `plan` sizes a job whose data need not be on this machine.
struct PlannedSamples {
  std::int64_t seq_length = 0;  // the samples' sequence length (the model's positions)
  std::int64_t vocab_size = 0;  // the tokenizer's vocabulary, before padding
  SampleSpec fields;            // every field with its per-sample shape, as sample_fields() gives
};

struct PluginContext {
  Logger& log;
  ParallelState& parallel;
  const config::ConfigTable& config;  // this plugin's own table, validated against its schema
  const config::CoreConfig& core;     // the core tables ([parallel], [training], ...)
};

// What a plugin exports. The first four fields are fixed for all API versions so any host can
// read any plugin's versions; later fields are appended only (minor version bump).
struct PluginDescriptor {
  std::uint32_t struct_size;
  std::uint32_t api_major;
  std::uint32_t api_minor;
  const char* abi_tag;
  // API 1.0
  PluginKind kind;
  const char* name;
  const char* version;
  const char* description;
  // Declares the keys of the plugin's table (the host adds `type`); may be nullptr for no keys.
  void (*declare_config)(config::TableSchema& schema);
  // Creates the plugin object; throws megatron::Error on bad input.
  std::unique_ptr<Plugin> (*create)(PluginContext& context);
  // API 5.0. Dataset plugins: what they will produce, from the validated table alone (no data
  // file opened), for `plan`; nullptr for other kinds.
  PlannedSamples (*plan_samples)(const config::ConfigTable& table, const config::CoreConfig& core);
};

// A descriptor whose version fields are those of the SDK headers the plugin is compiled with.
constexpr PluginDescriptor make_plugin_descriptor(
    PluginKind kind, const char* name, const char* version, const char* description,
    void (*declare_config)(config::TableSchema&), std::unique_ptr<Plugin> (*create)(PluginContext&),
    PlannedSamples (*plan_samples)(const config::ConfigTable&,
                                   const config::CoreConfig&) = nullptr) {
  return PluginDescriptor{sizeof(PluginDescriptor),
                          kApiMajor,
                          kApiMinor,
                          MEGATRON_ABI_TAG,
                          kind,
                          name,
                          version,
                          description,
                          declare_config,
                          create,
                          plan_samples};
}

// The one exported entry point: `const megatron::PluginDescriptor* fn()`.
using PluginEntry = const PluginDescriptor*();
inline constexpr const char* kPluginEntrySymbol = "megatron_plugin";

}  // namespace megatron

// Exports `fn` (a `const megatron::PluginDescriptor* fn()`) under the unmangled alias
// `megatron_plugin` in the `boostdll` section, where the host looks for it before loading.
#define MEGATRON_PLUGIN(fn) BOOST_DLL_ALIAS(fn, megatron_plugin)
