// Command-line options shared by the subcommands, parsed with Boost.Program_options.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace megatron::app {

struct CommonOptions {
  std::string config_file;               // --config
  std::vector<std::string> overrides;    // --set table.key=value, in order
  bool print_config = false;             // --print-config
  std::optional<std::string> log_level;  // --log-level overrides [logging] level
  bool help = false;                     // set by parse_arguments when --help was given
};

// Adds --config, --set, --print-config, --log-level and --help to `options`.
void add_common_options(boost::program_options::options_description& options, CommonOptions& values,
                        bool config_required);

// Parses `args` (the words after the subcommand) into `options`; throws UsageError with the
// subcommand's name and a pointer to --help on any mistake.
// With --help, required options are not enforced and `help` is set.
boost::program_options::variables_map parse_arguments(
    const std::string& command, const std::vector<std::string>& args,
    const boost::program_options::options_description& options, bool& help,
    const boost::program_options::positional_options_description* positional = nullptr);

}  // namespace megatron::app
