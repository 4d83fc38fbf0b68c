// `base = "other.toml"` inheritance: order of precedence, relative paths, cycles, missing files.
#include <gtest/gtest.h>

#include "config_helpers.h"

namespace megatron {
namespace {

using testing::config_error_of;
using testing::expect_contains;
using testing::TempDir;

TEST(ConfigInheritance, IncludingFileOverridesItsBase) {
  TempDir dir;
  dir.write("bases/common.toml", "[training]\nlr = 1e-3\nseed = 7\n[logging]\nlevel = \"warn\"\n");
  const auto main = dir.write("run.toml", "base = \"bases/common.toml\"\n[training]\nlr = 2e-3\n");
  const auto c = config::Config::load(main, {"logging.level=error"});
  EXPECT_DOUBLE_EQ(*c.core().training.lr, 2e-3);
  EXPECT_EQ(c.core().training.seed, 7);
  EXPECT_EQ(c.core().logging.level, "error");
  EXPECT_EQ(c.raw().files().size(), 2u);
  // The location of an inherited value is its own file.
  expect_contains(c.table("training").where("seed").to_string(), {"common.toml:3:"});
}

TEST(ConfigInheritance, ChainsOfBasesResolveRelativeToEachFile) {
  TempDir dir;
  dir.write("a/b/root.toml", "[training]\nseed = 1\nmicro_batch_size = 2\n");
  dir.write("a/mid.toml", "base = \"b/root.toml\"\n[training]\nseed = 2\n");
  const auto main = dir.write("top.toml", "base = \"a/mid.toml\"\n");
  const auto c = config::Config::load(main, {});
  EXPECT_EQ(c.core().training.seed, 2);
  EXPECT_EQ(c.core().training.micro_batch_size, 2);
}

TEST(ConfigInheritance, CycleIsDetectedAndShown) {
  TempDir dir;
  dir.write("a.toml", "base = \"b.toml\"\n");
  dir.write("b.toml", "base = \"a.toml\"\n");
  const auto message = config_error_of([&] { config::Config::load(dir.path() / "a.toml", {}); });
  expect_contains(message, {"cycle", "a.toml -> ", "b.toml -> "});
}

TEST(ConfigInheritance, SelfInclusionIsACycle) {
  TempDir dir;
  const auto self = dir.write("self.toml", "base = \"self.toml\"\n");
  expect_contains(config_error_of([&] { config::Config::load(self, {}); }), {"cycle"});
}

TEST(ConfigInheritance, MissingBaseNamesTheIncludingFile) {
  TempDir dir;
  const auto main = dir.write("run.toml", "base = \"nope.toml\"\n");
  expect_contains(config_error_of([&] { config::Config::load(main, {}); }),
                  {"nope.toml does not exist", "named as `base` in", "run.toml"});
}

TEST(ConfigInheritance, BaseMustBeAString) {
  TempDir dir;
  const auto main = dir.write("run.toml", "base = 3\n");
  expect_contains(config_error_of([&] { config::Config::load(main, {}); }),
                  {"run.toml:1:", "base: expected a path"});
}

TEST(ConfigInheritance, MissingConfigFile) {
  expect_contains(config_error_of([] { config::Config::load("/nonexistent/x.toml", {}); }),
                  {"config file /nonexistent/x.toml does not exist"});
}

}  // namespace
}  // namespace megatron
