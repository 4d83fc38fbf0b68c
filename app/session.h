// Everything a run needs, built in order and validated before any work: config, logger, plugin
// catalog, plugin tables, parallel state.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "megatron/config/config.h"
#include "megatron/log.h"
#include "megatron/parallel/mpi_runtime.h"
#include "megatron/plugin/catalog.h"

namespace megatron::app {

struct SelectedPlugin {
  std::string table;  // "model", "optimizer", "data" or "task"
  const PluginRecord* record = nullptr;
};

struct Session {
  config::Config config;
  std::shared_ptr<Logger> log;
  PluginCatalog catalog;
  std::vector<SelectedPlugin> selected;

  const SelectedPlugin* selected_for(std::string_view table) const;
};

struct SessionOptions {
  bool require_config = true;
  // false: plugin problems are kept in the catalog for display instead of thrown.
  bool refuse_bad_plugins = true;
};

// Loads the config (or the defaults when no file is given and none is required), applies the
// overrides, starts logging, scans the plugin search path and validates each plugin-selected table
// with its plugin's schema. Throws ConfigError / PluginError / UsageError.
Session open_session(const MpiRuntime& runtime, const CommonOptions& options,
                     const SessionOptions& session_options);

// The directory holding the running executable.
std::filesystem::path executable_dir();

}  // namespace megatron::app
