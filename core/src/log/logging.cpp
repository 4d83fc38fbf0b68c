// Builds the rank-stamped spdlog logger the host hands to every plugin.
#include "megatron/log.h"

#include <filesystem>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "megatron/error.h"

namespace megatron {

spdlog::level::level_enum parse_log_level(std::string_view level) {
  static const std::pair<std::string_view, spdlog::level::level_enum> levels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"critical", spdlog::level::critical},
      {"off", spdlog::level::off}};
  for (const auto& [name, value] : levels) {
    if (name == level) return value;
  }
  throw UsageError("unknown log level '" + std::string(level) +
                   "' (use trace, debug, info, warn, error, critical or off)");
}

std::shared_ptr<Logger> make_logger(const LogOptions& options) {
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!options.file.empty()) {
    std::string path = options.file;
    const std::string marker = "{rank}";
    for (auto pos = path.find(marker); pos != std::string::npos; pos = path.find(marker)) {
      path.replace(pos, marker.size(), std::to_string(options.rank));
    }
    try {
      const auto parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false));
    } catch (const std::exception& e) {
      throw Error("cannot open log file " + path + ": " + e.what());
    }
  }
  auto logger = std::make_shared<Logger>("megatron", sinks.begin(), sinks.end());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(options.rank) + "/" +
                      std::to_string(options.world_size) + "] [%^%l%$] %v");
  logger->set_level(parse_log_level(options.level));
  logger->flush_on(spdlog::level::warn);
  return logger;
}

}  // namespace megatron
