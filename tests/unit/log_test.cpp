// Logging: rank-stamped lines, per-rank log files, level parsing.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "config/config_helpers.h"
#include "megatron/error.h"
#include "megatron/log.h"

namespace megatron {
namespace {

TEST(Logging, PerRankFileGetsRankStampedLines) {
  testing::TempDir dir;
  const std::string pattern = (dir.path() / "logs" / "rank{rank}.log").string();
  {
    auto log = make_logger({"info", pattern, 3, 8});
    log->info("hello {}", 42);
    log->debug("not shown at info level");
    log->flush();
  }
  std::ifstream in(dir.path() / "logs" / "rank3.log");
  ASSERT_TRUE(in.good()) << "rank3.log was not created";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("[rank 3/8] [info] hello 42"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("not shown"), std::string::npos);
}

TEST(Logging, UnwritableLogFileIsAClearError) {
  try {
    make_logger({"info", "/proc/megatron-cannot-write/rank{rank}.log", 0, 1});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open log file /proc/megatron-cannot-write/rank0.log"),
              std::string::npos)
        << e.what();
  }
}

TEST(Logging, LevelsParseAndUnknownLevelIsRefused) {
  EXPECT_EQ(parse_log_level("warn"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("off"), spdlog::level::off);
  try {
    parse_log_level("loud");
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown log level 'loud'"), std::string::npos);
  }
}

}  // namespace
}  // namespace megatron
