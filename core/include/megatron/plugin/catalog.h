// Finds plugin files along the search path, inspects and loads them, refuses bad ones, and
// creates plugin objects. Libraries stay loaded for as long as the catalog lives.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/config/location.h"
#include "megatron/config/schema.h"
#include "megatron/plugin.h"

namespace megatron {

struct PluginSearchEntry {
  std::filesystem::path path;  // a directory of plugins or one plugin file
  std::string origin;          // "[plugins] paths", "MEGATRON_PLUGIN_PATH" or "installed"
  bool must_exist = true;      // false for the installed directory, which may be absent
};

// The search order: [plugins] paths, then MEGATRON_PLUGIN_PATH (colon-separated; may be null),
// then the installed plugin directory beside the executable (<prefix>/lib/megatron/plugins).
std::vector<PluginSearchEntry> plugin_search_path(const std::vector<std::string>& config_paths,
                                                  const char* env_value,
                                                  const std::filesystem::path& executable_dir);
// The installed plugin directory for an executable in <prefix>/bin.
std::filesystem::path installed_plugin_dir(const std::filesystem::path& executable_dir);

struct PluginRecord {
  PluginKind kind = PluginKind::task;
  std::string name;
  std::string version;
  std::string description;
  std::uint32_t api_major = 0;
  std::uint32_t api_minor = 0;
  std::filesystem::path file;
  const PluginDescriptor* descriptor = nullptr;
};

struct PluginProblem {
  std::filesystem::path file;
  std::string reason;
  std::string message() const { return "plugin " + file.string() + ": " + reason; }
};

class PluginCatalog {
 public:
  PluginCatalog();
  ~PluginCatalog();
  PluginCatalog(PluginCatalog&&) noexcept;
  PluginCatalog& operator=(PluginCatalog&&) noexcept;

  // Inspects every candidate file (without running it) and loads the good ones. Bad files are
  // collected in problems(), never thrown, so `megatron-app plugins` can show them all.
  static PluginCatalog scan(const std::vector<PluginSearchEntry>& search_path);

  const std::vector<PluginRecord>& plugins() const { return plugins_; }
  const std::vector<PluginProblem>& problems() const { return problems_; }
  const std::vector<PluginSearchEntry>& search_path() const { return search_path_; }
  // Throws PluginError listing every problem (one per line) when there is any.
  void throw_if_problems() const;

  const PluginRecord* find(PluginKind kind, std::string_view name) const;
  std::vector<std::string> names(PluginKind kind) const;
  // Like find(), but throws ConfigError at `where` naming the available plugins of that kind.
  const PluginRecord& require(PluginKind kind, std::string_view name,
                              const config::SourceLocation& where) const;

  // The plugin's table schema: `type` plus the keys its declare_config() adds.
  config::TableSchema config_schema(const PluginRecord& plugin) const;
  // Calls the plugin's create(); errors are rethrown naming the plugin and its file.
  std::unique_ptr<Plugin> create(const PluginRecord& plugin, PluginContext& context) const;

 private:
  struct Libraries;
  std::unique_ptr<Libraries> libraries_;
  std::vector<PluginRecord> plugins_;
  std::vector<PluginProblem> problems_;
  std::vector<PluginSearchEntry> search_path_;
};

}  // namespace megatron
