// `megatron-app plugins`: the search path, every plugin found, and every file refused.
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "cli.h"
#include "commands/commands.h"
#include "megatron/backend/cuda_status.h"
#include "megatron/version.h"
#include "session.h"

namespace megatron::app {

namespace po = boost::program_options;

int run_plugins(MpiRuntime& runtime, const std::vector<std::string>& args) {
  CommonOptions common;
  po::options_description options(
      "megatron-app plugins [--config FILE]\n"
      "Lists the plugins found on the search path ([plugins] paths, then MEGATRON_PLUGIN_PATH,\n"
      "then the installed plugin directory) and every file that was refused. Exit code 2 when\n"
      "any file was refused.\n\nOptions");
  add_common_options(options, common, false);
  parse_arguments("plugins", args, options, common.help);
  if (common.help) {
    std::cout << options << "\n";
    return 0;
  }

  Session session =
      open_session(runtime, common, {.require_config = false, .refuse_bad_plugins = false});
  if (runtime.world_rank() != 0) return session.catalog.problems().empty() ? 0 : 2;

  const CudaStatus cuda = cuda_status();
  std::cout << fmt::format("megatron-app {} (SDK API {}.{}, ABI {})\n", core_version_string(),
                           core_api_major(), core_api_minor(), core_abi_tag());
  std::cout << fmt::format("CUDA backend: {}\n",
                           cuda.compiled ? fmt::format("compiled for {}; {} device(s): {}",
                                                       cuda.archs, cuda.device_count, cuda.message)
                                         : cuda.message);
  std::cout << "search path:\n";
  for (const auto& entry : session.catalog.search_path()) {
    std::cout << fmt::format("  {} ({})\n", entry.path.string(), entry.origin);
  }

  const auto& plugins = session.catalog.plugins();
  if (plugins.empty()) {
    std::cout << "no plugins found\n";
  } else {
    std::cout << fmt::format("{:<10} {:<20} {:<10} {:<5} {}\n", "KIND", "NAME", "VERSION", "API",
                             "FILE");
    for (const auto& p : plugins) {
      std::cout << fmt::format("{:<10} {:<20} {:<10} {:<5} {}\n", plugin_kind_name(p.kind), p.name,
                               p.version, fmt::format("{}.{}", p.api_major, p.api_minor),
                               p.file.string());
    }
  }
  const auto& problems = session.catalog.problems();
  if (!problems.empty()) {
    std::cout.flush();
    std::cerr << "refused:\n";
    for (const auto& p : problems)
      std::cerr << "  " << p.message() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace megatron::app
