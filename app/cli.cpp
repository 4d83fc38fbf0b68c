// Parsing of the options every subcommand shares.
#include "cli.h"

#include "megatron/error.h"

namespace megatron::app {

namespace po = boost::program_options;

void add_common_options(po::options_description& options, CommonOptions& values,
                        bool config_required) {
  auto config = po::value<std::string>(&values.config_file)->value_name("FILE");
  if (config_required) config->required();
  options.add_options()                         //
      ("config,c", config, "TOML config file")  //
      ("set",
       po::value<std::vector<std::string>>(&values.overrides)
           ->composing()
           ->value_name("TABLE.KEY=VALUE"),
       "override a config key (repeatable), e.g. --set training.lr=3e-4")  //
      ("print-config", po::bool_switch(&values.print_config),
       "print the fully resolved config as TOML and exit")  //
      ("log-level",
       po::value<std::string>()->value_name("LEVEL")->notifier(
           [&](const std::string& v) { values.log_level = v; }),
       "trace, debug, info, warn, error, critical or off (overrides [logging] level)")  //
      ("help,h", "show this help");
}

po::variables_map parse_arguments(const std::string& command, const std::vector<std::string>& args,
                                  const po::options_description& options, bool& help,
                                  const po::positional_options_description* positional) {
  po::variables_map vm;
  try {
    po::command_line_parser parser(args);
    parser.options(options);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    help = vm.count("help") > 0;
    if (!help) po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError("megatron-app " + command + ": " + e.what() + " (see `megatron-app " +
                     command + " --help`)");
  }
  return vm;
}

}  // namespace megatron::app
