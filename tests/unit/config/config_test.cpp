// Config loading, typed values, defaults, overrides and --print-config round trips.
#include <gtest/gtest.h>

#include "config_helpers.h"

namespace megatron {
namespace {

using testing::expect_contains;
using testing::parse_config;

TEST(Config, EmptyConfigTakesMegatronDefaults) {
  const auto c = parse_config("");
  EXPECT_EQ(c.core().parallel.tensor_model_parallel_size, 1);
  EXPECT_EQ(c.core().parallel.rank_order(), "tp-cp-ep-dp-pp");
  EXPECT_EQ(c.core().training.micro_batch_size, 1);
  EXPECT_FALSE(c.core().training.global_batch_size.has_value());
  EXPECT_DOUBLE_EQ(c.core().training.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.core().training.clip_grad, 1.0);
  EXPECT_EQ(c.core().training.seed, 1234);
  EXPECT_EQ(c.core().training.lr_decay_style, "linear");
  EXPECT_EQ(c.core().logging.log_interval, 100);
  EXPECT_EQ(c.core().runtime.device, "cpu");
}

TEST(Config, TrainingScheduleAndLossScaleDefaultsAreMegatrons) {
  const auto c = parse_config("");
  const auto& t = c.core().training;
  EXPECT_EQ(t.lr_warmup_init, 0.0);
  EXPECT_EQ(t.lr_wsd_decay_style, "exponential");
  EXPECT_FALSE(t.lr_wsd_decay_iters.has_value());
  EXPECT_FALSE(t.lr_wsd_decay_samples.has_value());
  EXPECT_EQ(t.weight_decay_incr_style, "constant");
  EXPECT_FALSE(t.start_weight_decay.has_value());
  EXPECT_FALSE(t.end_weight_decay.has_value());
  EXPECT_FALSE(t.loss_scale.has_value());
  EXPECT_EQ(t.initial_loss_scale, 4294967296.0);  // 2^32
  EXPECT_EQ(t.min_loss_scale, 1.0);
  EXPECT_EQ(t.loss_scale_window, 1000);
  EXPECT_EQ(t.hysteresis, 2);
  EXPECT_FALSE(t.exit_interval.has_value());
}

TEST(Config, ReadsScheduleKeys) {
  const auto c = parse_config(R"(
[training]
train_samples = 10000
lr = 3e-4
lr_decay_style = "WSD"
lr_wsd_decay_style = "minus_sqrt"
lr_wsd_decay_samples = 2000
lr_warmup_init = 1e-5
weight_decay_incr_style = "cosine"
start_weight_decay = 0.01
end_weight_decay = 0.1
fp16 = true
loss_scale = 128.0
hysteresis = 3
exit_interval = 50
)");
  const auto& t = c.core().training;
  EXPECT_EQ(t.lr_decay_style, "WSD");
  EXPECT_EQ(t.lr_wsd_decay_style, "minus_sqrt");
  EXPECT_EQ(t.lr_wsd_decay_samples, 2000);
  EXPECT_DOUBLE_EQ(t.lr_warmup_init, 1e-5);
  EXPECT_EQ(t.weight_decay_incr_style, "cosine");
  EXPECT_EQ(t.start_weight_decay, 0.01);
  EXPECT_EQ(t.end_weight_decay, 0.1);
  EXPECT_EQ(t.loss_scale, 128.0);
  EXPECT_EQ(t.hysteresis, 3);
  EXPECT_EQ(t.exit_interval, 50);
  for (const char* style : {"constant", "linear", "cosine", "inverse-square-root"}) {
    EXPECT_EQ(parse_config("", {std::string("training.lr_decay_style=") + style})
                  .core()
                  .training.lr_decay_style,
              style);
  }
}

TEST(Config, ReadsTypedValues) {
  const auto c = parse_config(R"(
[parallel]
tensor_model_parallel_size = 2
pipeline_model_parallel_size = 4
sequence_parallel = true
use_tp_pp_dp_mapping = true
[training]
micro_batch_size = 4
global_batch_size = 64
train_iters = 100
lr = 1
lr_decay_style = "cosine"
[runtime]
device = "cuda:1"
)");
  EXPECT_EQ(c.core().parallel.tensor_model_parallel_size, 2);
  EXPECT_EQ(c.core().parallel.pipeline_model_parallel_size, 4);
  EXPECT_TRUE(c.core().parallel.sequence_parallel);
  EXPECT_EQ(c.core().parallel.rank_order(), "tp-cp-ep-pp-dp");
  EXPECT_EQ(c.core().training.global_batch_size, 64);
  EXPECT_EQ(c.core().training.train_iters, 100);
  EXPECT_DOUBLE_EQ(*c.core().training.lr, 1.0);  // an integer where a number is expected
  EXPECT_EQ(c.core().training.lr_decay_style, "cosine");
  EXPECT_EQ(c.core().runtime.device, "cuda:1");
  EXPECT_TRUE(c.table("training").is_set("lr"));
  EXPECT_FALSE(c.table("training").is_set("min_lr"));
  EXPECT_EQ(c.table("training").where("lr").to_string(), "test.toml:11:6");
}

TEST(Config, OverridesAreTypedLikeTheFile) {
  const auto c = parse_config(
      "[training]\nlr = 1e-3\n",
      {"training.lr=3e-4", "training.lr_decay_style=cosine",
       "parallel.tensor_model_parallel_size=2", "training.rampup_batch_size=[16, 16, 1000]",
       "training.global_batch_size=64", "training.train_samples=5000"});
  EXPECT_DOUBLE_EQ(*c.core().training.lr, 3e-4);
  EXPECT_EQ(c.core().training.lr_decay_style, "cosine");  // bare word taken as a string
  EXPECT_EQ(c.core().parallel.tensor_model_parallel_size, 2);
  EXPECT_EQ(c.core().training.rampup_batch_size, (std::vector<std::int64_t>{16, 16, 1000}));
  EXPECT_EQ(c.table("training").where("lr").to_string(), "--set training.lr=3e-4");
}

TEST(Config, LaterOverrideWins) {
  const auto c = parse_config("", {"training.seed=1", "training.seed=2"});
  EXPECT_EQ(c.core().training.seed, 2);
}

TEST(Config, PrintedConfigReadsBackIdentically) {
  const auto first = parse_config(R"(
[training]
lr = 0.00015
min_lr = 1.0e-5
train_iters = 500
lr_warmup_fraction = 0.01
[logging]
level = "debug"
)");
  const std::string printed = first.to_toml();
  expect_contains(printed, {"[training]", "lr = 0.00015", "min_lr = 1e-05", "seed = 1234",
                            "[logging]", "level = \"debug\"", "[plugins]", "paths = []"});
  const auto second = parse_config(printed);
  EXPECT_EQ(second.to_toml(), printed);
}

TEST(Config, PathsAreResolvedRelativeToTheirFile) {
  testing::TempDir dir;
  const auto file = dir.write(
      "sub/run.toml", "[checkpoint]\nsave = \"ckpt\"\n[plugins]\npaths = [\"/abs/p\", \"rel\"]\n");
  const auto c = config::Config::load(file, {});
  EXPECT_EQ(c.core().checkpoint.save, (dir.path() / "sub" / "ckpt").string());
  EXPECT_EQ(c.core().plugins.paths,
            (std::vector<std::string>{"/abs/p", (dir.path() / "sub" / "rel").string()}));
}

TEST(Config, PluginTableIsValidatedWithThePluginSchema) {
  auto c = parse_config("[task]\ntype = \"demo\"\nrepeat = 3\n");
  config::TableSchema keys("task");
  keys.integer("repeat", 1, "times", config::Range::at_least(1)).string("greeting", "hi", "text");
  const auto& t = c.validate_plugin_table(config::plugin_table_schema("task", "demo", keys));
  EXPECT_EQ(t.integer("repeat"), 3);
  EXPECT_EQ(t.string("greeting"), "hi");
  EXPECT_EQ(t.string("type"), "demo");
  expect_contains(c.to_toml(), {"[task]", "type = \"demo\"", "repeat = 3", "greeting = \"hi\""});
}

// A plugin reusing declared keys with its own defaults and narrower choices (as an out-of-tree
// model does with the shared [model] keys).
TEST(Config, DeclaredKeysTakeNewDefaultsAndNarrowerChoices) {
  config::TableSchema keys("task");
  keys.integer("repeat", 1, "times", config::Range::at_least(1))
      .string("mode", "fast", "how", {"fast", "slow", "exact"})
      .optional_string("label", "a label");
  keys.set_default("repeat", std::int64_t{4})
      .set_default("label", std::string("none"))
      .set_default("mode", std::string("slow"))
      .set_choices("mode", {"slow", "exact"}, "how (no fast mode here)");
  auto c = parse_config("[task]\ntype = \"demo\"\n");
  const auto& t = c.validate_plugin_table(config::plugin_table_schema("task", "demo", keys));
  EXPECT_EQ(t.integer("repeat"), 4);
  EXPECT_EQ(t.string("label"), "none");
  EXPECT_EQ(t.string("mode"), "slow");
  auto fast = parse_config("[task]\ntype = \"demo\"\nmode = \"fast\"\n");
  EXPECT_THROW(fast.validate_plugin_table(config::plugin_table_schema("task", "demo", keys)),
               ConfigError);

  EXPECT_THROW(keys.set_default("missing", std::int64_t{1}), Error);
  EXPECT_THROW(keys.set_default("repeat", std::string("four")), Error);  // not an integer
  EXPECT_THROW(keys.set_default("mode", std::string("fast")), Error);    // no longer a choice
  EXPECT_THROW(keys.set_choices("mode", {"exact"}), Error);              // default "slow" left out
  EXPECT_THROW(keys.set_choices("repeat", {"1"}), Error);                // not a string key
}

}  // namespace
}  // namespace megatron
