// `megatron-app NAME ... --config FILE` for a NAME that is not built in: a command the config's
// [data] plugin adds (Dataset::commands, e.g. the retro dataset's `retro` stages), run on every
// rank with the plugin created but not built.
#include <iostream>

#include "cli.h"
#include "commands/commands.h"
#include "megatron/dataset.h"
#include "megatron/error.h"
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
  std::string names;
  for (const DatasetCommand& command : offered) {
    if (command.name == name) return command.run(rest);
    names += (names.empty() ? "" : ", ") + command.name;
  }
  throw UsageError("megatron-app " + name + ": not a built-in command, and the [data] plugin '" +
                   selected->record->name + "' adds " +
                   (names.empty() ? std::string("no commands") : "only: " + names));
}

}  // namespace megatron::app
