// `megatron-app NAME ... --config FILE` for a NAME that is not built in: a command the config's
// [data] plugin adds (Dataset::commands, e.g. the retro dataset's `retro` stages), run on every
// rank with the plugin created but not built.
#include <iostream>

#include "cli.h"
#include "commands/commands.h"
#include "megatron/config/raw_config.h"
#include "megatron/dataset.h"
#include "megatron/error.h"
#include "megatron/model.h"
#include "plugin_objects.h"
#include "session.h"

namespace megatron::app {

namespace po = boost::program_options;

namespace {

// The host's own options (--config, --set, --log-level, --print-config) out of `args`; the rest,
// --help included, in order for the plugin's command.
std::vector<std::string> split_host_options(const std::string& name,
                                            const std::vector<std::string>& args,
                                            CommonOptions& common) {
  po::options_description host;
  add_common_options(host, common, false);
  po::options_description own;  // add_common_options' --help belongs to the plugin's command
  for (const auto& option : host.options())
    if (option->long_name() != "help") own.add(option);
  try {
    const po::parsed_options parsed =
        po::command_line_parser(args).options(own).allow_unregistered().run();
    po::variables_map vm;
    po::store(parsed, vm);
    po::notify(vm);
    return po::collect_unrecognized(parsed.options, po::include_positional);
  } catch (const po::error& e) {
    throw UsageError("megatron-app " + name + ": " + e.what());
  }
}

// A model plugin created from a whole config's text: the host's `create_model` service. The
// configs stay alive as long as the command, since a plugin may keep references into its table.
class ModelFactory {
 public:
  ModelFactory(Session& session, ParallelState& parallel)
      : session_(session), parallel_(parallel) {}

  std::unique_ptr<Model> create(const std::string& config_toml, const std::string& origin) {
    configs_.push_back(std::make_unique<config::Config>(
        config::Config::from_raw(config::RawConfig::load_string(config_toml, origin))));
    config::Config& cfg = *configs_.back();
    const config::RawTable* raw = cfg.raw().find("model");
    const auto type = raw ? raw->keys.find("type") : decltype(raw->keys.find("type")){};
    if (!raw || type == raw->keys.end() || type->second.type != config::RawValue::Type::string) {
      throw ConfigError(origin + ": no [model] table naming a model plugin (type = \"...\")");
    }
    const PluginRecord& record =
        session_.catalog.require(PluginKind::model, type->second.string, type->second.where);
    PluginContext context{*session_.log, parallel_,
                          cfg.validate_plugin_table(session_.catalog.config_schema(record)),
                          cfg.core()};
    std::unique_ptr<Plugin> object = session_.catalog.create(record, context);
    auto* model = dynamic_cast<Model*>(object.get());
    if (!model) {
      throw PluginError("model plugin '" + record.name + "' (" + record.file.string() +
                        ") created an object that does not implement megatron::Model");
    }
    object.release();
    return std::unique_ptr<Model>(model);
  }

 private:
  Session& session_;
  ParallelState& parallel_;
  std::vector<std::unique_ptr<config::Config>> configs_;
};

}  // namespace

int run_plugin_command(MpiRuntime& runtime, const std::string& name,
                       const std::vector<std::string>& args) {
  CommonOptions common;
  const std::vector<std::string> rest = split_host_options(name, args, common);
  Session session = open_session(runtime, common, {});
  const SelectedPlugin* selected = session.selected_for("data");
  if (!selected) {
    throw UsageError("megatron-app " + name + ": not a built-in command, and the config (" +
                     common.config_file + ") has no [data] table naming a plugin that adds it");
  }
  ParallelState parallel =
      ParallelState::create(runtime, parallel_sizes(session.config.core().parallel));
  auto dataset =
      create_plugin<Dataset>(session, parallel, "data", "megatron::Dataset", "type = \"retro\"");
  std::vector<DatasetCommand> offered = dataset->commands();
  ModelFactory models(session, parallel);
  CommandServices services;
  services.create_model = [&models](const std::string& toml, const std::string& origin) {
    return models.create(toml, origin);
  };
  std::string names;
  for (const DatasetCommand& command : offered) {
    if (command.name == name) return command.run(rest, services);
    names += (names.empty() ? "" : ", ") + command.name;
  }
  throw UsageError("megatron-app " + name + ": not a built-in command, and the [data] plugin '" +
                   selected->record->name + "' adds " +
                   (names.empty() ? std::string("no commands") : "only: " + names));
}

}  // namespace megatron::app
