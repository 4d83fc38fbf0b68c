// Bad configs: each is refused with a message naming the place, the key and what is wrong.
#include <gtest/gtest.h>

#include "config_helpers.h"

namespace megatron {
namespace {

using testing::config_error_of;
using testing::expect_contains;
using testing::parse_config;

std::string error_for(const std::string& text, std::initializer_list<std::string> overrides = {}) {
  return config_error_of([&] { parse_config(text, overrides); });
}

TEST(BadConfig, InvalidTomlSyntaxNamesLineAndColumn) {
  expect_contains(error_for("[training]\nlr = = 3\n"), {"test.toml:2:", "invalid TOML"});
}

TEST(BadConfig, UnknownKeySuggestsTheClosestName) {
  expect_contains(error_for("[training]\nmicro_bach_size = 4\n"),
                  {"test.toml:2:", "training.micro_bach_size", "unknown key in [training]",
                   "did you mean 'micro_batch_size'?"});
}

TEST(BadConfig, KeyInTheWrongTableNamesItsHome) {
  expect_contains(error_for("[parallel]\nseed = 4\n"),
                  {"test.toml:2:", "parallel.seed", "'seed' belongs in [training]"});
}

TEST(BadConfig, UnknownTableSuggestsTheClosestTable) {
  expect_contains(error_for("[trainig]\nlr = 1.0\n"),
                  {"test.toml:1:", "unknown table [trainig]", "did you mean [training]?"});
}

TEST(BadConfig, TopLevelKeyMustBeInATable) {
  expect_contains(error_for("lr = 1.0\n"),
                  {"test.toml:1:1", "top-level key 'lr' must be inside a table"});
}

TEST(BadConfig, StringWhereIntegerExpected) {
  expect_contains(
      error_for("[training]\nmicro_batch_size = \"four\"\n"),
      {"test.toml:2:", "training.micro_batch_size", "expected an integer", "got string \"four\""});
}

TEST(BadConfig, FloatWhereIntegerExpected) {
  expect_contains(error_for("[parallel]\ntensor_model_parallel_size = 2.5\n"),
                  {"parallel.tensor_model_parallel_size", "expected an integer", "number 2.5"});
}

TEST(BadConfig, BooleanWrittenAsString) {
  expect_contains(error_for("[training]\nbf16 = \"yes\"\n"),
                  {"training.bf16", "expected a boolean (true or false)"});
}

TEST(BadConfig, OutOfRangeInteger) {
  expect_contains(error_for("[parallel]\npipeline_model_parallel_size = 0\n"),
                  {"test.toml:2:", "parallel.pipeline_model_parallel_size",
                   "value 0 is out of range", "must be >= 1"});
}

TEST(BadConfig, OutOfRangeReal) {
  expect_contains(error_for("[training]\nlr_warmup_fraction = 1.5\n"),
                  {"training.lr_warmup_fraction", "out of range", "in [0, 1]"});
}

TEST(BadConfig, NegativeLearningRate) {
  expect_contains(error_for("[training]\nlr = -0.1\n"), {"training.lr", "must be >= 0"});
}

TEST(BadConfig, ChoiceTypoIsSuggested) {
  expect_contains(
      error_for("[training]\nlr_decay_style = \"cosin\"\n"),
      {"training.lr_decay_style", "\"cosin\" is not one of", "did you mean \"cosine\"?"});
}

TEST(BadConfig, ListItemOfTheWrongKind) {
  expect_contains(error_for("[training]\nrampup_batch_size = [16, \"x\", 100]\n"),
                  {"training.rampup_batch_size", "an item is string \"x\""});
}

TEST(BadConfig, TrainItersAndTrainSamplesTogether) {
  expect_contains(error_for("[training]\ntrain_iters = 10\ntrain_samples = 100\n"),
                  {"test.toml:3:", "training.train_samples",
                   "set either train_iters or train_samples, not both"});
}

TEST(BadConfig, MinLrAboveLr) {
  expect_contains(error_for("[training]\nlr = 1e-4\nmin_lr = 1e-3\n"),
                  {"training.min_lr", "min_lr (0.001) is larger than lr (0.0001)"});
}

TEST(BadConfig, GlobalBatchNotAMultipleOfMicroBatch) {
  expect_contains(error_for("[training]\nmicro_batch_size = 3\nglobal_batch_size = 16\n"),
                  {"training.global_batch_size", "must be a multiple of micro_batch_size (3)"});
}

TEST(BadConfig, SequenceParallelNeedsTensorParallel) {
  expect_contains(error_for("[parallel]\nsequence_parallel = true\n"),
                  {"parallel.sequence_parallel", "needs tensor_model_parallel_size > 1"});
}

TEST(BadConfig, Bf16AndFp16Together) {
  expect_contains(error_for("[training]\nbf16 = true\nfp16 = true\n"),
                  {"training.fp16", "bf16 and fp16 cannot both be enabled"});
}

TEST(BadConfig, RampupNeedsSampleBasedTraining) {
  expect_contains(error_for("[training]\ntrain_iters = 10\nglobal_batch_size = "
                            "32\nrampup_batch_size = [16, 16, 100]\n"),
                  {"training.rampup_batch_size", "only supported with sample-based training"});
}

TEST(BadConfig, RampupIncrementMustDivideTheRemainder) {
  expect_contains(
      error_for("[training]\ntrain_samples = 1000\nglobal_batch_size = 30\n"
                "rampup_batch_size = [16, 8, 100]\n"),
      {"training.rampup_batch_size", "minus the start (16)", "multiple of the increment (8)"});
}

TEST(BadConfig, SaveIntervalWithoutSaveDirectory) {
  expect_contains(error_for("[checkpoint]\nsave_interval = 100\n"),
                  {"checkpoint.save_interval", "no `save` directory"});
}

TEST(BadConfig, BadDeviceString) {
  expect_contains(error_for("[runtime]\ndevice = \"gpu0\"\n"),
                  {"test.toml:2:", "runtime.device", "\"gpu0\" is not a device"});
}

TEST(BadConfig, BadLogLevel) {
  expect_contains(error_for("[logging]\nlevel = \"verbose\"\n"),
                  {"logging.level", "\"verbose\" is not one of"});
}

TEST(BadConfig, OverrideWithWrongTypeNamesTheOverride) {
  expect_contains(error_for("", {"training.micro_batch_size=abc"}),
                  {"--set training.micro_batch_size=abc", "training.micro_batch_size",
                   "expected an integer", "got string \"abc\""});
}

TEST(BadConfig, OverrideWithoutEqualsSign) {
  expect_contains(error_for("", {"training.lr"}),
                  {"--set training.lr", "expected table.key=value"});
}

TEST(BadConfig, OverrideWithoutTable) {
  expect_contains(error_for("", {"lr=3"}), {"--set lr=3", "is not a key path"});
}

TEST(BadConfig, OverrideOfAnUnknownKey) {
  expect_contains(error_for("", {"training.learning_rate=3"}),
                  {"--set training.learning_rate=3", "unknown key in [training]"});
}

TEST(BadConfig, NestedTableWhereAValueIsExpected) {
  expect_contains(error_for("[training.lr]\nvalue = 3\n"),
                  {"training.lr", "expected a number, got a table"});
}

TEST(BadConfig, InfiniteNumberRefused) {
  expect_contains(error_for("[training]\nlr = inf\n"), {"training.lr", "finite"});
}

TEST(BadConfig, PluginTableKeysCheckedByThePluginSchema) {
  auto c = parse_config("[task]\ntype = \"demo\"\nrepet = 3\n");
  config::TableSchema keys("task");
  keys.integer("repeat", 1, "times", config::Range::at_least(1));
  expect_contains(config_error_of([&] {
                    c.validate_plugin_table(config::plugin_table_schema("task", "demo", keys));
                  }),
                  {"test.toml:3:", "task.repet", "did you mean 'repeat'?"});
}

TEST(BadConfig, PluginTableRuleFailureNamesTheKey) {
  auto c = parse_config("[task]\ntype = \"demo\"\nlow = 5\nhigh = 2\n");
  config::TableSchema keys("task");
  keys.integer("low", 0, "").integer("high", 1, "").rule([](const config::ConfigTable& t) {
    if (t.integer("low") > t.integer("high")) t.fail("high", "must not be below low");
  });
  expect_contains(config_error_of([&] {
                    c.validate_plugin_table(config::plugin_table_schema("task", "demo", keys));
                  }),
                  {"test.toml:4:", "task.high", "must not be below low"});
}

}  // namespace
}  // namespace megatron
