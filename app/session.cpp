// Builds a Session: config, logger, plugin catalog and plugin tables, refusing bad input early.
#include "session.h"

#include <cstdlib>

#include <boost/dll/runtime_symbol_info.hpp>

#include "megatron/error.h"

namespace megatron::app {

namespace {

PluginKind kind_for_table(const std::string& table) {
  for (auto kind :
       {PluginKind::model, PluginKind::optimizer, PluginKind::dataset, PluginKind::task}) {
    if (table == plugin_kind_table(kind)) return kind;
  }
  throw Error("no plugin kind is selected by table [" + table + "]");
}

std::string available(const PluginCatalog& catalog, PluginKind kind) {
  std::string out;
  for (const auto& n : catalog.names(kind))
    out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// Validates [model], [optimizer], [data] and [task] with the schemas of the plugins they name.
std::vector<SelectedPlugin> select_plugins(config::Config& cfg, const PluginCatalog& catalog) {
  std::vector<SelectedPlugin> selected;
  for (const auto& table : config::plugin_table_names()) {
    const config::RawTable* raw = cfg.raw().find(table);
    if (!raw) continue;
    const PluginKind kind = kind_for_table(table);
    auto type = raw->keys.find("type");
    if (type == raw->keys.end()) {
      throw ConfigError((raw->where.known() ? raw->where.to_string() + ": " : std::string()) +
                        table + ".type: required key is missing; it names the " +
                        plugin_kind_name(kind) +
                        " plugin to use (available: " + available(catalog, kind) + ")");
    }
    if (type->second.type != config::RawValue::Type::string) {
      throw ConfigError(type->second.where.to_string() + ": " + table +
                        ".type: expected a plugin name (string), got " + type->second.describe());
    }
    const PluginRecord& record = catalog.require(kind, type->second.string, type->second.where);
    cfg.validate_plugin_table(catalog.config_schema(record));
    selected.push_back({table, &record});
  }
  return selected;
}

}  // namespace

const SelectedPlugin* Session::selected_for(std::string_view table) const {
  for (const auto& s : selected) {
    if (s.table == table) return &s;
  }
  return nullptr;
}

std::filesystem::path executable_dir() {
  return std::filesystem::path(boost::dll::program_location().parent_path().string());
}

Session open_session(const MpiRuntime& runtime, const CommonOptions& options,
                     const SessionOptions& session_options) {
  if (options.config_file.empty() && session_options.require_config) {
    throw UsageError("no config file given: use --config FILE");
  }
  config::Config cfg = [&] {
    if (!options.config_file.empty())
      return config::Config::load(options.config_file, options.overrides);
    config::RawConfig raw;
    for (const auto& o : options.overrides)
      raw.apply_override(o);
    return config::Config::from_raw(std::move(raw));
  }();

  LogOptions log_options;
  log_options.level = options.log_level.value_or(cfg.core().logging.level);
  log_options.file = cfg.core().logging.file;
  log_options.rank = runtime.world_rank();
  log_options.world_size = runtime.world_size();
  auto log = make_logger(log_options);

  const char* env = std::getenv("MEGATRON_PLUGIN_PATH");
  PluginCatalog catalog =
      PluginCatalog::scan(plugin_search_path(cfg.core().plugins.paths, env, executable_dir()));
  if (session_options.refuse_bad_plugins) catalog.throw_if_problems();
  log->debug("found {} plugin(s)", catalog.plugins().size());

  Session session{std::move(cfg), std::move(log), std::move(catalog), {}};
  session.selected = select_plugins(session.config, session.catalog);
  return session;
}

}  // namespace megatron::app
