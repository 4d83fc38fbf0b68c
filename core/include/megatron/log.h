// Logging: spdlog loggers that stamp every line with the rank, to stderr and optionally a file.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace megatron {

using Logger = spdlog::logger;

struct LogOptions {
  std::string level = "info";
  std::string file;  // "" for none; "{rank}" is replaced by the world rank
  int rank = 0;
  int world_size = 1;
};

// Throws UsageError naming the accepted levels.
spdlog::level::level_enum parse_log_level(std::string_view level);

// A logger named "megatron" writing "[time] [rank R/W] [level] message"; throws Error when the
// log file cannot be opened.
std::shared_ptr<Logger> make_logger(const LogOptions& options);

}  // namespace megatron
