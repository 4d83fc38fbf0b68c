// Megatron's training log line and validation box, character for character, and the same figures
// as JSON lines for [logging] metrics_file.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megatron::train {

// One averaged loss ("lm loss", MoE losses, ...), in the order the model reports them.
struct NamedLoss {
  std::string name;
  double value = 0.0;
};

// The figures of one log interval. Optional fields are printed only when set, as Megatron prints
// them only when enabled (throughput with --log-throughput, grad norm when clipping computes it).
struct TrainingLogFigures {
  std::int64_t iteration = 0;
  std::int64_t train_iters = 0;
  std::int64_t consumed_samples = 0;
  std::int64_t skipped_samples = 0;  // printed only when > 0
  double elapsed_ms_per_iteration = 0.0;
  std::optional<double> tflops_per_gpu;
  // Model FLOP utilization: tflops_per_gpu over the rank's peak (a fraction; printed in %).
  std::optional<double> mfu;
  double learning_rate = 0.0;
  std::int64_t global_batch_size = 0;
  // Printed as given: Megatron's loop drops a loss whose interval average is negative (or zero in
  // older versions) before it gets here, which is the caller's choice.
  std::vector<NamedLoss> losses;
  double loss_scale = 1.0;
  std::optional<double> grad_norm;
  std::optional<double> params_norm;
  std::int64_t skipped_iterations = 0;
  std::int64_t nan_iterations = 0;
};

// Local time as Megatron's datetime.now().strftime('%Y-%m-%d %H:%M:%S').
std::string log_timestamp(std::chrono::system_clock::time_point when);

// Python's format() for the specs the log uses: "{:.Nf}" and "{:.NE}" (nan/inf spelled as Python
// spells them: "nan", "inf", "NAN", "INF", never "-nan").
std::string py_format_fixed(double value, int precision);
std::string py_format_exp(double value, int precision);

// ` [2024-05-01 12:00:00] iteration       10/     100 | consumed samples:          160 |
// elapsed time per iteration (ms): 123.4 | throughput per GPU (TFLOP/s/GPU): 1.5 | learning rate:
// 1.500000E-04 | global batch size:    16 | lm loss: 6.543210E+00 | loss scale: 1.0 | grad norm:
// 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |` as one line, no
// newline. `timestamp` is put between the brackets as given (see log_timestamp).
std::string format_training_log(const TrainingLogFigures& figures, std::string_view timestamp);

// Megatron's perplexity for a loss: exp(min(20, loss)); a NaN loss gives exp(20), as Python's min.
double perplexity(double loss);

// When an evaluation runs: every eval_interval during training, or once more after training.
enum class EvalKind { periodic, final_validation, final_test };
// "iteration N", "iteration N on validation set", "iteration N on test set".
std::string eval_prefix(std::int64_t iteration, EvalKind kind);

// evaluate_and_print_results: the three lines Megatron prints (no newlines):
//   dashes of length len(text) + 1,
//   ` validation loss at {prefix} | {name} value: {:.6E} | {name} PPL: {:.6E} | ` per loss,
//   the same dashes.
std::vector<std::string> format_validation_box(std::string_view prefix,
                                               const std::vector<NamedLoss>& losses);

// One JSON object on one line (no newline) for the metrics file:
// {"record":"train","iteration":..,"train_iters":..,"consumed_samples":..,"elapsed_ms":..,
//  "tflops":..|null,"lr":..,"global_batch_size":..,"<loss name>":.. per loss,"loss_scale":..,
//  "grad_norm":..|null,"skipped_iterations":..,"nan_iterations":..}
// Non-finite numbers are written as null (JSON has no NaN). Throws megatron::Error when a loss
// name collides with one of the fixed keys.
std::string training_metrics_json(const TrainingLogFigures& figures);
// {"record":"validation","iteration":..,"set":"validation"|"test","final":true|false,
//  "<loss name>":..,"<loss name> PPL":.. per loss}
std::string validation_metrics_json(std::int64_t iteration, EvalKind kind,
                                    const std::vector<NamedLoss>& losses);

}  // namespace megatron::train
