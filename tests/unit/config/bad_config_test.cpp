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

TEST(BadConfig, WarmupFractionExcludesWarmupIters) {
  expect_contains(error_for("[training]\nlr_warmup_iters = 10\nlr_warmup_fraction = 0.01\n"),
                  {"test.toml:3:", "training.lr_warmup_fraction",
                   "at most one of lr_warmup_iters, lr_warmup_samples and lr_warmup_fraction"});
  expect_contains(error_for("[training]\nlr_warmup_samples = 10\nlr_warmup_fraction = 0.01\n"),
                  {"training.lr_warmup_fraction", "at most one of"});
  // A zero count is Megatron's default, not a second warm-up.
  EXPECT_NO_THROW(parse_config("[training]\nlr_warmup_iters = 0\nlr_warmup_fraction = 0.01\n"));
}

TEST(BadConfig, IterationBasedTrainingRefusesSampleKeys) {
  expect_contains(error_for("[training]\ntrain_iters = 10\nlr_decay_samples = 100\n"),
                  {"training.lr_decay_samples", "with train_iters", "lr_decay_iters"});
  expect_contains(error_for("[training]\ntrain_iters = 10\nlr_warmup_samples = 100\n"),
                  {"training.lr_warmup_samples", "with train_iters", "lr_warmup_iters"});
  expect_contains(error_for("[training]\ntrain_iters = 10\nlr_decay_style = \"WSD\"\n"
                            "lr_wsd_decay_samples = 100\n"),
                  {"test.toml:4:", "training.lr_wsd_decay_samples", "lr_wsd_decay_iters"});
}

TEST(BadConfig, SampleBasedTrainingRefusesIterationKeys) {
  expect_contains(error_for("[training]\ntrain_samples = 1000\nlr_decay_iters = 10\n"),
                  {"training.lr_decay_iters", "with train_samples", "lr_decay_samples"});
  expect_contains(error_for("[training]\ntrain_samples = 1000\nlr_warmup_iters = 10\n"),
                  {"training.lr_warmup_iters", "with train_samples", "lr_warmup_samples"});
  expect_contains(error_for("[training]\ntrain_samples = 1000\nlr_wsd_decay_iters = 10\n"),
                  {"training.lr_wsd_decay_iters", "with train_samples", "lr_wsd_decay_samples"});
}

TEST(BadConfig, WsdNeedsItsAnnealingSpan) {
  expect_contains(error_for("[training]\ntrain_iters = 10\nlr_decay_style = \"WSD\"\n"),
                  {"test.toml:3:", "training.lr_decay_style", "needs its annealing span",
                   "lr_wsd_decay_iters", "lr_wsd_decay_samples"});
  expect_contains(error_for("[training]\nlr_wsd_decay_iters = 5\nlr_wsd_decay_samples = 50\n"),
                  {"training.lr_wsd_decay_samples", "not both"});
}

TEST(BadConfig, WsdAnnealStyleChoices) {
  expect_contains(error_for("[training]\nlr_wsd_decay_style = \"sqrt\"\n"),
                  {"training.lr_wsd_decay_style", "\"sqrt\" is not one of"});
}

TEST(BadConfig, WarmupInitAboveLr) {
  expect_contains(error_for("[training]\nlr = 1e-4\nlr_warmup_init = 1e-3\n"),
                  {"training.lr_warmup_init", "lr_warmup_init (0.001) is larger than lr (0.0001)"});
}

TEST(BadConfig, WeightDecayIncrementKeys) {
  expect_contains(error_for("[training]\nstart_weight_decay = 0.01\n"),
                  {"training.start_weight_decay", "applies only with weight_decay_incr_style"});
  expect_contains(error_for("[training]\nweight_decay_incr_style = \"linear\"\n"
                            "start_weight_decay = 0.01\n"),
                  {"training.weight_decay_incr_style",
                   "\"linear\" needs start_weight_decay and end_weight_decay"});
  expect_contains(error_for("[training]\nweight_decay_incr_style = \"cosine\"\n"
                            "start_weight_decay = 0.1\nend_weight_decay = 0.01\n"),
                  {"test.toml:4:", "training.end_weight_decay",
                   "end_weight_decay (0.01) is smaller than start_weight_decay (0.1)"});
}

TEST(BadConfig, LossScaleKeys) {
  expect_contains(error_for("[training]\nmin_loss_scale = 1024.0\ninitial_loss_scale = 512.0\n"),
                  {"training.min_loss_scale",
                   "min_loss_scale (1024.0) is larger than initial_loss_scale (512.0)"});
  expect_contains(error_for("[training]\nloss_scale = 0.0\n"), {"training.loss_scale", "> 0"});
  expect_contains(error_for("[training]\nhysteresis = 0\n"), {"training.hysteresis", ">= 1"});
  expect_contains(error_for("[training]\nloss_scale_window = 0\n"),
                  {"training.loss_scale_window", ">= 1"});
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
