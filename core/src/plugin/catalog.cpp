// Plugin discovery and loading with Boost.DLL: inspect the file, load it, check its descriptor.
#include "megatron/plugin/catalog.h"

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <set>

#include <boost/dll/library_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "megatron/config/config.h"
#include "megatron/error.h"

namespace megatron {

namespace fs = std::filesystem;

struct PluginCatalog::Libraries {
  // Never unloaded while the catalog lives: plugin objects, exceptions and vtables point into them.
  std::vector<boost::dll::shared_library> loaded;
};

PluginCatalog::PluginCatalog() : libraries_(std::make_unique<Libraries>()) {}
PluginCatalog::~PluginCatalog() = default;
PluginCatalog::PluginCatalog(PluginCatalog&&) noexcept = default;
PluginCatalog& PluginCatalog::operator=(PluginCatalog&&) noexcept = default;

fs::path installed_plugin_dir(const fs::path& executable_dir) {
  return (executable_dir.parent_path() / MEGATRON_PLUGIN_INSTALL_DIR).lexically_normal();
}

std::vector<PluginSearchEntry> plugin_search_path(const std::vector<std::string>& config_paths,
                                                  const char* env_value,
                                                  const fs::path& executable_dir) {
  std::vector<PluginSearchEntry> out;
  for (const auto& p : config_paths)
    out.push_back({p, "[plugins] paths", true});
  if (env_value) {
    std::string_view rest(env_value);
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const std::string_view item = rest.substr(0, colon);
      if (!item.empty()) out.push_back({fs::path(item), "MEGATRON_PLUGIN_PATH", true});
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  out.push_back({installed_plugin_dir(executable_dir), "installed", false});
  return out;
}

namespace {

std::string version_text(std::uint32_t major, std::uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

bool valid_kind(PluginKind kind) {
  const auto k = static_cast<std::int32_t>(kind);
  return k >= static_cast<std::int32_t>(PluginKind::model) &&
         k <= static_cast<std::int32_t>(PluginKind::task);
}

// Lowercase letters, digits and '_', starting with a letter: usable as a config value and a file name.
bool valid_plugin_name(std::string_view name) {
  if (name.empty() || name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// Returns "" when the descriptor is acceptable, else the reason it is refused.
std::string check_descriptor(const PluginDescriptor* d) {
  if (!d) return "its entry point returned no descriptor (nullptr)";
  if (d->struct_size < offsetof(PluginDescriptor, kind)) {
    return "its descriptor is too small (" + std::to_string(d->struct_size) +
           " bytes) to hold even the version fields";
  }
  const std::string plugin_api = version_text(d->api_major, d->api_minor);
  const std::string host_api = version_text(core_api_major(), core_api_minor());
  if (d->api_major != core_api_major()) {
    return "it was built for SDK API " + plugin_api + " but this host provides API " + host_api +
           " (major versions must be equal); rebuild the plugin against this SDK";
  }
  if (d->api_minor > core_api_minor()) {
    return "it was built for SDK API " + plugin_api + ", newer than this host's API " + host_api +
           "; upgrade megatron-app or rebuild the plugin against this SDK";
  }
  if (!d->abi_tag || std::string_view(d->abi_tag) != core_abi_tag()) {
    return std::string("its C++ ABI tag '") + (d->abi_tag ? d->abi_tag : "(none)") +
           "' differs from the host's '" + core_abi_tag() +
           "'; rebuild it with the same compiler and standard library";
  }
  if (d->struct_size < sizeof(PluginDescriptor)) {
    return "its descriptor has " + std::to_string(d->struct_size) + " bytes, API " + plugin_api +
           " needs " + std::to_string(sizeof(PluginDescriptor));
  }
  if (!valid_kind(d->kind)) {
    return "its descriptor has an unknown kind (" + std::to_string(static_cast<int>(d->kind)) +
           "); kinds are model, optimizer, dataset and task";
  }
  if (!d->name || !valid_plugin_name(d->name)) {
    return std::string("its name '") + (d->name ? d->name : "(null)") +
           "' is not a valid plugin name (lowercase letters, digits and '_', starting with a "
           "letter)";
  }
  if (!d->create) return "its descriptor has no create() function";
  return {};
}

// Why `file` cannot be a shared library on this system, or "" when it starts like one. Boost's
// library_info reports a bad file only as an iostream error, so look at the header first.
std::string not_an_elf_reason(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "cannot be opened for reading";
  char magic[4] = {};
  in.read(magic, sizeof magic);
  if (in.gcount() < 4)
    return "is not a shared library (the file is " + std::to_string(in.gcount()) + " bytes long)";
  if (magic[0] != 0x7f || magic[1] != 'E' || magic[2] != 'L' || magic[3] != 'F') {
    return "is not a shared library (no ELF header)";
  }
  return {};
}

std::vector<fs::path> candidate_files(const PluginSearchEntry& entry,
                                      std::vector<PluginProblem>& problems) {
  std::error_code ec;
  const auto status = fs::status(entry.path, ec);
  if (ec || !fs::exists(status)) {
    if (entry.must_exist) {
      problems.push_back({entry.path, "does not exist (listed in " + entry.origin + ")"});
    }
    return {};
  }
  if (!fs::is_directory(status)) return {entry.path};  // named explicitly: try it whatever its name
  std::vector<fs::path> files;
  for (const auto& item : fs::directory_iterator(entry.path, ec)) {
    if (item.path().extension() == ".so" && item.is_regular_file(ec)) files.push_back(item.path());
  }
  if (ec) problems.push_back({entry.path, "cannot be listed: " + ec.message()});
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

PluginCatalog PluginCatalog::scan(const std::vector<PluginSearchEntry>& search_path) {
  PluginCatalog catalog;
  catalog.search_path_ = search_path;
  std::set<fs::path> seen;

  for (const auto& entry : search_path) {
    for (const auto& file : candidate_files(entry, catalog.problems_)) {
      std::error_code ec;
      const fs::path canonical = fs::weakly_canonical(file, ec);
      if (!seen.insert(ec ? file : canonical).second) continue;  // same file reached twice

      // Look at the file before running any of its code.
      if (std::string reason = not_an_elf_reason(file); !reason.empty()) {
        catalog.problems_.push_back({file, reason});
        continue;
      }
      bool symbol_listed = false;
      bool has_symbol_table = false;
      try {
        boost::dll::library_info info(boost::dll::fs::path(file.string()), true);
        const auto symbols = info.symbols();
        has_symbol_table = !symbols.empty();
        symbol_listed =
            std::find(symbols.begin(), symbols.end(), kPluginEntrySymbol) != symbols.end();
      } catch (const std::exception& e) {
        catalog.problems_.push_back(
            {file, std::string("is not a shared library (") + e.what() + ")"});
        continue;
      }
      if (has_symbol_table && !symbol_listed) {
        catalog.problems_.push_back(
            {file, std::string("does not export the symbol '") + kPluginEntrySymbol +
                       "' (build it with MEGATRON_PLUGIN(...) from megatron/plugin.h)"});
        continue;
      }

      boost::dll::shared_library library;
      try {
        library.load(boost::dll::fs::path(file.string()),
                     boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
      } catch (const std::exception& e) {
        catalog.problems_.push_back({file, std::string("cannot be loaded: ") + e.what()});
        continue;
      }
      if (!library.has(kPluginEntrySymbol)) {  // stripped files have no symbol table to inspect
        catalog.problems_.push_back(
            {file, std::string("does not export the symbol '") + kPluginEntrySymbol +
                       "' (build it with MEGATRON_PLUGIN(...) from megatron/plugin.h)"});
        continue;
      }

      const PluginDescriptor* d = nullptr;
      try {
        d = library.get_alias<PluginEntry>(kPluginEntrySymbol)();
      } catch (const std::exception& e) {
        catalog.problems_.push_back({file, std::string("its entry point failed: ") + e.what()});
        continue;
      }
      if (std::string reason = check_descriptor(d); !reason.empty()) {
        catalog.problems_.push_back({file, reason});
        continue;
      }
      if (const PluginRecord* other = catalog.find(d->kind, d->name)) {
        catalog.problems_.push_back(
            {file, std::string("is a second ") + plugin_kind_name(d->kind) + " plugin named '" +
                       d->name + "'; " + other->file.string() +
                       " already provides it (remove one of the two files)"});
        continue;
      }
      catalog.plugins_.push_back({d->kind, d->name, d->version ? d->version : "",
                                  d->description ? d->description : "", d->api_major, d->api_minor,
                                  file, d});
      catalog.libraries_->loaded.push_back(std::move(library));
    }
  }
  return catalog;
}

void PluginCatalog::throw_if_problems() const {
  if (problems_.empty()) return;
  std::string text = problems_.size() == 1
                         ? "a plugin was refused:"
                         : std::to_string(problems_.size()) + " plugins were refused:";
  for (const auto& p : problems_)
    text += "\n  " + p.message();
  throw PluginError(text);
}

const PluginRecord* PluginCatalog::find(PluginKind kind, std::string_view name) const {
  for (const auto& p : plugins_) {
    if (p.kind == kind && p.name == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> PluginCatalog::names(PluginKind kind) const {
  std::vector<std::string> out;
  for (const auto& p : plugins_) {
    if (p.kind == kind) out.push_back(p.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

const PluginRecord& PluginCatalog::require(PluginKind kind, std::string_view name,
                                           const config::SourceLocation& where) const {
  if (const PluginRecord* p = find(kind, name)) return *p;
  std::string available;
  for (const auto& n : names(kind))
    available += (available.empty() ? "" : ", ") + n;
  if (available.empty()) available = "none";
  std::string searched;
  for (const auto& e : search_path_)
    searched += (searched.empty() ? "" : ", ") + e.path.string();
  throw ConfigError((where.known() ? where.to_string() + ": " : std::string()) +
                    plugin_kind_table(kind) + ".type: no " + plugin_kind_name(kind) +
                    " plugin named '" + std::string(name) + "'; available " +
                    plugin_kind_name(kind) + " plugins: " + available + " (searched " + searched +
                    ")");
}

config::TableSchema PluginCatalog::config_schema(const PluginRecord& plugin) const {
  config::TableSchema keys(plugin_kind_table(plugin.kind), plugin.description);
  if (plugin.descriptor->declare_config) {
    try {
      plugin.descriptor->declare_config(keys);
    } catch (const std::exception& e) {
      throw PluginError("plugin '" + plugin.name + "' (" + plugin.file.string() +
                        ") failed to declare its config: " + e.what());
    }
  }
  return config::plugin_table_schema(plugin_kind_table(plugin.kind), plugin.name, keys);
}

std::unique_ptr<Plugin> PluginCatalog::create(const PluginRecord& plugin,
                                              PluginContext& context) const {
  const std::string who = std::string(plugin_kind_name(plugin.kind)) + " plugin '" + plugin.name +
                          "' (" + plugin.file.string() + ")";
  std::unique_ptr<Plugin> object;
  try {
    object = plugin.descriptor->create(context);
  } catch (const ConfigError&) {
    throw;  // already names the config key and file
  } catch (const Error& e) {
    throw Error(who + ": " + e.what());
  } catch (const std::exception& e) {
    throw Error(who + " threw a non-megatron exception: " + e.what());
  }
  if (!object) throw Error(who + ": create() returned nothing");
  return object;
}

}  // namespace megatron
