// megatron-app: dispatches to a subcommand and turns errors into messages and exit codes.
#include <algorithm>
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "commands/commands.h"
#include "megatron/config/validate.h"
#include "megatron/error.h"
#include "megatron/version.h"

namespace megatron::app {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", run_train, "run the job in the config: train a model or run its [task] (default)"},
      {"plugins", run_plugins, "list the plugins found, with versions, and the files refused"},
      {"plan", run_plan, "report per-rank parameters, memory and FLOPs of the config's model"},
      {"preprocess", run_preprocess, "tokenize loose JSON lines into a Megatron indexed dataset"},
      {"inspect", run_inspect, "show a checkpoint's tensors and statistics, or diff two"},
      {"data", run_data, "print the samples of a split in the order training consumes them"},
      {"generate", run_generate, "generate text from a trained language model's checkpoint"},
      {"serve", run_serve,
       "serve text generation over HTTP (Megatron's /api, OpenAI's /v1 endpoints)"},
  };
  return table;
}

namespace {

void print_usage() {
  std::cout << "usage: megatron-app [COMMAND] [OPTIONS]\n\ncommands:\n";
  for (const auto& c : commands())
    std::cout << "  " << c.name << std::string(12 - std::string(c.name).size(), ' ') << c.summary
              << "\n";
  std::cout << "\n`megatron-app COMMAND --help` shows a command's options; without a COMMAND,\n"
               "`train` runs: megatron-app --config configs/gpt_tiny.toml\n"
               "A dataset plugin may add commands, run with the config that selects it, e.g.\n"
               "`megatron-app retro build-db --config configs/retro_tiny.toml`.\n";
}

const Command* find_command(const std::string& name) {
  for (const auto& c : commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

}  // namespace

int main(std::vector<std::string> args) {
  if (!args.empty() && (args[0] == "--version" || args[0] == "-V")) {
    std::cout << "megatron-app " << core_version_string() << " (SDK API " << core_api_major() << "."
              << core_api_minor() << ", ABI " << core_abi_tag() << ")\n";
    return 0;
  }
  if (args.empty() || ((args[0] == "--help" || args[0] == "-h") && args.size() == 1)) {
    print_usage();
    return args.empty() ? 2 : 0;
  }

  const Command* command = find_command("train");
  std::string plugin_command;  // a command the config's [data] plugin adds
  if (args[0].rfind("-", 0) != 0) {
    command = find_command(args[0]);
    const bool has_config = std::any_of(args.begin(), args.end(), [](const std::string& a) {
      return a == "--config" || a == "-c" || a.rfind("--config=", 0) == 0;
    });
    if (!command && has_config) {
      plugin_command = args[0];
    } else if (!command) {
      std::vector<std::string> names;
      for (const auto& c : commands())
        names.push_back(c.name);
      const std::string guess = config::suggest(args[0], names);
      std::cerr << "megatron-app: error: unknown command '" << args[0] << "'"
                << (guess.empty() ? "" : "; did you mean '" + guess + "'?")
                << " (a command a dataset plugin adds, such as `retro`, needs --config)\n";
      print_usage();
      return 2;
    }
    args.erase(args.begin());
  }

  std::unique_ptr<MpiRuntime> runtime;
  int exit_code = 0;
  std::string message;
  try {
    runtime = std::make_unique<MpiRuntime>();
    if (!plugin_command.empty()) return run_plugin_command(*runtime, plugin_command, args);
    return command->run(*runtime, args);
  } catch (const ConfigError& e) {
    exit_code = 2, message = e.what();
  } catch (const PluginError& e) {
    exit_code = 2, message = e.what();
  } catch (const UsageError& e) {
    exit_code = 2, message = e.what();
  } catch (const NumericalError& e) {
    exit_code = 3, message = e.what();
  } catch (const CheckpointSaveError& e) {
    exit_code = 4, message = e.what();
  } catch (const CheckpointDamagedError& e) {
    exit_code = 5, message = e.what();
  } catch (const Error& e) {
    exit_code = 1, message = e.what();
  } catch (const std::exception& e) {
    exit_code = 1, message = std::string("internal error: ") + e.what();
  }
  const bool many = runtime && runtime->world_size() > 1;
  std::cerr << "megatron-app: error"
            << (many ? " on rank " + std::to_string(runtime->world_rank()) : "") << ": " << message
            << std::endl;
  // Other ranks may be waiting in a collective: end the whole job rather than hang.
  if (many) runtime->abort(exit_code);
  return exit_code;
}

}  // namespace megatron::app

int main(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f) then fails with EFBIG like a full disk, and the
  // failed save is handled (previous checkpoint kept, logged) instead of the process being killed
  // by SIGXFSZ mid-save, whatever signal dispositions the launcher (mpirun resets them) passed on.
  std::signal(SIGXFSZ, SIG_IGN);
  return megatron::app::main(std::vector<std::string>(argv + 1, argv + argc));
}
