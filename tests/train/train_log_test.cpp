// The training log line and validation box against strings Python's format() produced from
// Megatron's own statements (training_log / evaluate_and_print_results), and the JSON records.
#include <chrono>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "megatron/error.h"
#include "megatron/train/train_log.h"

namespace megatron::train {
namespace {

TrainingLogFigures sample_figures() {
  TrainingLogFigures f;
  f.iteration = 10;
  f.train_iters = 100;
  f.consumed_samples = 160;
  f.elapsed_ms_per_iteration = 1234.56;
  f.tflops_per_gpu = 12.345;
  f.learning_rate = 1.5e-4;
  f.global_batch_size = 16;
  f.losses = {{"lm loss", 6.54321}};
  f.loss_scale = 65536.0;
  f.grad_norm = 1.23456;
  return f;
}

TEST(TrainingLog, MatchesMegatronCharacterForCharacter) {
  // python3: the statements of Megatron's training_log with these figures.
  EXPECT_EQ(format_training_log(sample_figures(), "2024-05-01 12:34:56"),
            " [2024-05-01 12:34:56] iteration       10/     100 | consumed samples:          160 "
            "| elapsed time per iteration (ms): 1234.6 | throughput per GPU (TFLOP/s/GPU): 12.3 | "
            "learning rate: 1.500000E-04 | global batch size:    16 | lm loss: 6.543210E+00 | "
            "loss scale: 65536.0 | grad norm: 1.235 | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |");
}

TEST(TrainingLog, OptionalFieldsAppearOnlyWhenSet) {
  auto f = sample_figures();
  f.tflops_per_gpu.reset();
  f.grad_norm.reset();
  f.losses = {{"lm loss", 2.0}, {"load balancing loss", 0.015}};
  f.skipped_samples = 7;
  f.params_norm = 250.0;
  f.skipped_iterations = 2;
  f.nan_iterations = 1;
  EXPECT_EQ(format_training_log(f, "T"),
            " [T] iteration       10/     100 | consumed samples:          160 | skipped samples: "
            "           7 | elapsed time per iteration (ms): 1234.6 | learning rate: 1.500000E-04 "
            "| global batch size:    16 | lm loss: 2.000000E+00 | load balancing loss: "
            "1.500000E-02 | loss scale: 65536.0 | params norm: 250.000 | number of skipped "
            "iterations:   2 | number of nan iterations:   1 |");
}

TEST(TrainingLog, SmallThroughputKeepsThreeDecimalsAndMfuFollowsIt) {
  // Below 10 TFLOP/s (a CPU) Megatron's one decimal would print 0.1 for every model.
  auto f = sample_figures();
  f.tflops_per_gpu = 0.08734;
  f.mfu = 0.40437;
  const auto line = format_training_log(f, "T");
  EXPECT_NE(line.find(" | throughput per GPU (TFLOP/s/GPU): 0.087 | MFU: 40.4% | learning rate:"),
            std::string::npos)
      << line;
  f.tflops_per_gpu = 10.04;
  EXPECT_NE(format_training_log(f, "T").find("(TFLOP/s/GPU): 10.0 | MFU"), std::string::npos);
  const auto j = nlohmann::json::parse(training_metrics_json(f));
  EXPECT_EQ(j["mfu"].get<double>(), 0.40437);
  EXPECT_TRUE(nlohmann::json::parse(training_metrics_json(sample_figures()))["mfu"].is_null());
}

TEST(TrainingLog, PythonNumberSpellings) {
  // python3: '{:.6E}'.format(1e-100) '1.000000E-100', float('nan') -> 'NAN' / 'nan',
  // '{:.1f}'.format(0.25) '0.2' (exact binary half rounds to even), -0.0 -> '-0.000000E+00'.
  EXPECT_EQ(py_format_exp(1e-100, 6), "1.000000E-100");
  EXPECT_EQ(py_format_exp(1.5e-4, 6), "1.500000E-04");
  EXPECT_EQ(py_format_exp(std::nan(""), 6), "NAN");
  EXPECT_EQ(py_format_exp(-std::numeric_limits<double>::quiet_NaN(), 6), "NAN");
  EXPECT_EQ(py_format_exp(-INFINITY, 6), "-INF");
  EXPECT_EQ(py_format_exp(-0.0, 6), "-0.000000E+00");
  EXPECT_EQ(py_format_fixed(std::nan(""), 3), "nan");
  EXPECT_EQ(py_format_fixed(-INFINITY, 1), "-inf");
  EXPECT_EQ(py_format_fixed(0.25, 1), "0.2");
  EXPECT_EQ(py_format_fixed(0.35, 1), "0.3");

  auto f = sample_figures();
  f.iteration = 123456789;
  f.losses = {{"lm loss", std::nan("")}};
  f.grad_norm = std::nan("");
  const auto line = format_training_log(f, "T");
  EXPECT_NE(line.find(" iteration 123456789/     100 |"), std::string::npos) << line;
  EXPECT_NE(line.find(" lm loss: NAN |"), std::string::npos) << line;
  EXPECT_NE(line.find(" grad norm: nan |"), std::string::npos) << line;
}

TEST(TrainingLog, TimestampFormat) {
  const auto ts = log_timestamp(std::chrono::system_clock::now());
  ASSERT_EQ(ts.size(), 19u) << ts;  // YYYY-MM-DD HH:MM:SS
  EXPECT_EQ(ts[4], '-');
  EXPECT_EQ(ts[10], ' ');
  EXPECT_EQ(ts[13], ':');
}

TEST(ValidationBox, MatchesMegatron) {
  // python3: Megatron's loop with losses lm loss = 3.5 and mtp loss = 25 (PPL capped at e^20);
  // the text is 154 characters, so the dashes are 155.
  const auto box = format_validation_box(eval_prefix(100, EvalKind::periodic),
                                         {{"lm loss", 3.5}, {"mtp loss", 25.0}});
  ASSERT_EQ(box.size(), 3u);
  EXPECT_EQ(box[1],
            " validation loss at iteration 100 | lm loss value: 3.500000E+00 | lm loss PPL: "
            "3.311545E+01 | mtp loss value: 2.500000E+01 | mtp loss PPL: 4.851652E+08 | ");
  EXPECT_EQ(box[0], std::string(155, '-'));
  EXPECT_EQ(box[2], box[0]);
}

TEST(ValidationBox, FinalPrefixes) {
  EXPECT_EQ(eval_prefix(500, EvalKind::final_validation), "iteration 500 on validation set");
  EXPECT_EQ(eval_prefix(500, EvalKind::final_test), "iteration 500 on test set");
  const auto box = format_validation_box(eval_prefix(500, EvalKind::final_test), {{"lm loss", 1}});
  EXPECT_EQ(box[1],
            " validation loss at iteration 500 on test set | lm loss value: 1.000000E+00 | lm loss "
            "PPL: 2.718282E+00 | ");
  EXPECT_EQ(box[0].size(), box[1].size() + 1);
}

TEST(ValidationBox, PerplexityCapsAtExp20) {
  EXPECT_DOUBLE_EQ(perplexity(25.0), std::exp(20.0));
  EXPECT_DOUBLE_EQ(perplexity(std::nan("")), std::exp(20.0));  // Python's min(20, nan) is 20
  EXPECT_DOUBLE_EQ(perplexity(0.0), 1.0);
}

TEST(MetricsJson, TrainingRecordParsesBack) {
  const auto line = training_metrics_json(sample_figures());
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["record"], "train");
  EXPECT_EQ(j["iteration"], 10);
  EXPECT_EQ(j["train_iters"], 100);
  EXPECT_EQ(j["consumed_samples"], 160);
  EXPECT_EQ(j["elapsed_ms"].get<double>(), 1234.56);  // full precision, not the log's rounding
  EXPECT_EQ(j["tflops"].get<double>(), 12.345);
  EXPECT_EQ(j["lr"].get<double>(), 1.5e-4);
  EXPECT_EQ(j["global_batch_size"], 16);
  EXPECT_EQ(j["lm loss"].get<double>(), 6.54321);
  EXPECT_EQ(j["loss_scale"].get<double>(), 65536.0);
  EXPECT_EQ(j["grad_norm"].get<double>(), 1.23456);
  EXPECT_EQ(j["skipped_iterations"], 0);
  EXPECT_EQ(j["nan_iterations"], 0);
  // Keys in log-line order.
  EXPECT_LT(line.find("\"lr\""), line.find("\"lm loss\""));
  EXPECT_LT(line.find("\"lm loss\""), line.find("\"loss_scale\""));
}

TEST(MetricsJson, AbsentAndNonFiniteFiguresAreNull) {
  auto f = sample_figures();
  f.tflops_per_gpu.reset();
  f.grad_norm = std::nan("");
  f.losses = {{"lm loss", INFINITY}};
  const auto j = nlohmann::json::parse(training_metrics_json(f));
  EXPECT_TRUE(j["tflops"].is_null());
  EXPECT_TRUE(j["grad_norm"].is_null());
  EXPECT_TRUE(j["lm loss"].is_null());
}

TEST(MetricsJson, LossNameCollidingWithAFixedKeyIsRefused) {
  auto f = sample_figures();
  f.losses = {{"grad_norm", 1.0}};
  EXPECT_THROW(training_metrics_json(f), Error);
}

TEST(MetricsJson, ValidationRecordParsesBack) {
  const auto j = nlohmann::json::parse(
      validation_metrics_json(500, EvalKind::final_test, {{"lm loss", 1.0}, {"mtp loss", 25.0}}));
  EXPECT_EQ(j["record"], "validation");
  EXPECT_EQ(j["iteration"], 500);
  EXPECT_EQ(j["set"], "test");
  EXPECT_EQ(j["final"], true);
  EXPECT_EQ(j["lm loss"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["lm loss PPL"].get<double>(), std::exp(1.0));
  EXPECT_DOUBLE_EQ(j["mtp loss PPL"].get<double>(), std::exp(20.0));
  const auto periodic =
      nlohmann::json::parse(validation_metrics_json(100, EvalKind::periodic, {{"lm loss", 2.0}}));
  EXPECT_EQ(periodic["set"], "validation");
  EXPECT_EQ(periodic["final"], false);
}

}  // namespace
}  // namespace megatron::train
