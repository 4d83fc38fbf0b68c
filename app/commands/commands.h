// The subcommands of megatron-app; each parses its own options and returns the exit code.
#pragma once

#include <string>
#include <vector>

#include "megatron/parallel/mpi_runtime.h"

namespace megatron::app {

using CommandFn = int (*)(MpiRuntime& runtime, const std::vector<std::string>& args);

struct Command {
  const char* name;
  CommandFn run;
  const char* summary;
};

int run_train(MpiRuntime& runtime, const std::vector<std::string>& args);
int run_plugins(MpiRuntime& runtime, const std::vector<std::string>& args);
int run_plan(MpiRuntime& runtime, const std::vector<std::string>& args);
int run_preprocess(MpiRuntime& runtime, const std::vector<std::string>& args);
int run_inspect(MpiRuntime& runtime, const std::vector<std::string>& args);
int run_data(MpiRuntime& runtime, const std::vector<std::string>& args);
int run_generate(MpiRuntime& runtime, const std::vector<std::string>& args);
int run_serve(MpiRuntime& runtime, const std::vector<std::string>& args);
// A command the config's [data] plugin adds (`name` is not built in).
int run_plugin_command(MpiRuntime& runtime, const std::string& name,
                       const std::vector<std::string>& args);

const std::vector<Command>& commands();

}  // namespace megatron::app
