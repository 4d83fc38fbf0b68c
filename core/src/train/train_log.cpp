// Megatron's training_log line and evaluate_and_print_results box (training.py), and their JSON.
#include "megatron/train/train_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "megatron/error.h"

namespace megatron::train {

namespace {

// printf with an int64 and a width, as Python's "{:Nd}".
std::string py_format_int(std::int64_t value, int width) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%*lld", width, static_cast<long long>(value));
  return buf;
}

std::string printf_double(const char* spec, int precision, double value) {
  const int n = std::snprintf(nullptr, 0, spec, precision, value);
  std::string out(static_cast<std::size_t>(n), '\0');
  std::snprintf(out.data(), out.size() + 1, spec, precision, value);
  return out;
}

// Python spells non-finite numbers without printf's "-nan"; upper case for the E format.
std::string non_finite(double value, bool upper) {
  if (std::isnan(value)) return upper ? "NAN" : "nan";
  const char* inf = upper ? "INF" : "inf";
  return value < 0 ? std::string("-") + inf : std::string(inf);
}

using Json = nlohmann::ordered_json;

Json number_or_null(double value) {
  return std::isfinite(value) ? Json(value) : Json(nullptr);
}

}  // namespace

std::string py_format_fixed(double value, int precision) {
  if (!std::isfinite(value)) return non_finite(value, false);
  return printf_double("%.*f", precision, value);
}

std::string py_format_exp(double value, int precision) {
  if (!std::isfinite(value)) return non_finite(value, true);
  return printf_double("%.*E", precision, value);
}

std::string log_timestamp(std::chrono::system_clock::time_point when) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm local{};
  localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

std::string format_training_log(const TrainingLogFigures& f, std::string_view timestamp) {
  std::string s;
  s.reserve(512);
  s += " [";
  s += timestamp;
  s += "]";
  s += " iteration " + py_format_int(f.iteration, 8) + "/" + py_format_int(f.train_iters, 8) + " |";
  s += " consumed samples: " + py_format_int(f.consumed_samples, 12) + " |";
  if (f.skipped_samples > 0)
    s += " skipped samples: " + py_format_int(f.skipped_samples, 12) + " |";
  s += " elapsed time per iteration (ms): " + py_format_fixed(f.elapsed_ms_per_iteration, 1) + " |";
  if (f.tflops_per_gpu) {
    // Megatron's one decimal, and three below 10 TFLOP/s, where one would say nothing (a CPU).
    const int decimals = *f.tflops_per_gpu < 10 ? 3 : 1;
    s +=
        " throughput per GPU (TFLOP/s/GPU): " + py_format_fixed(*f.tflops_per_gpu, decimals) + " |";
  }
  if (f.mfu) s += " MFU: " + py_format_fixed(*f.mfu * 100, 1) + "% |";
  s += " learning rate: " + py_format_exp(f.learning_rate, 6) + " |";
  s += " global batch size: " + py_format_int(f.global_batch_size, 5) + " |";
  for (const auto& loss : f.losses) {
    s += " " + loss.name + ": " + py_format_exp(loss.value, 6) + " |";
  }
  s += " loss scale: " + py_format_fixed(f.loss_scale, 1) + " |";
  if (f.grad_norm) s += " grad norm: " + py_format_fixed(*f.grad_norm, 3) + " |";
  if (f.params_norm) s += " params norm: " + py_format_fixed(*f.params_norm, 3) + " |";
  s += " number of skipped iterations: " + py_format_int(f.skipped_iterations, 3) + " |";
  s += " number of nan iterations: " + py_format_int(f.nan_iterations, 3) + " |";
  return s;
}

double perplexity(double loss) {
  return std::exp(std::min(20.0, loss));
}

std::string eval_prefix(std::int64_t iteration, EvalKind kind) {
  std::string prefix = "iteration " + std::to_string(iteration);
  switch (kind) {
    case EvalKind::periodic:
      break;
    case EvalKind::final_validation:
      prefix += " on validation set";
      break;
    case EvalKind::final_test:
      prefix += " on test set";
      break;
  }
  return prefix;
}

std::vector<std::string> format_validation_box(std::string_view prefix,
                                               const std::vector<NamedLoss>& losses) {
  std::string text = " validation loss at ";
  text += prefix;
  text += " | ";
  for (const auto& loss : losses) {
    text += loss.name + " value: " + py_format_exp(loss.value, 6) + " | ";
    text += loss.name + " PPL: " + py_format_exp(perplexity(loss.value), 6) + " | ";
  }
  // Megatron's len() counts code points; loss names are ASCII, so bytes are the same.
  std::string dashes(text.size() + 1, '-');
  return {dashes, text, dashes};
}

std::string training_metrics_json(const TrainingLogFigures& f) {
  Json j;
  j["record"] = "train";
  j["iteration"] = f.iteration;
  j["train_iters"] = f.train_iters;
  j["consumed_samples"] = f.consumed_samples;
  j["elapsed_ms"] = number_or_null(f.elapsed_ms_per_iteration);
  j["tflops"] = f.tflops_per_gpu ? number_or_null(*f.tflops_per_gpu) : Json(nullptr);
  j["mfu"] = f.mfu ? number_or_null(*f.mfu) : Json(nullptr);
  j["lr"] = number_or_null(f.learning_rate);
  j["global_batch_size"] = f.global_batch_size;
  // Losses sit between fixed keys; a loss with a fixed key's name would overwrite it silently.
  static constexpr const char* kFixed[] = {"record",
                                           "iteration",
                                           "train_iters",
                                           "consumed_samples",
                                           "elapsed_ms",
                                           "tflops",
                                           "mfu",
                                           "lr",
                                           "global_batch_size",
                                           "loss_scale",
                                           "grad_norm",
                                           "skipped_iterations",
                                           "nan_iterations"};
  for (const auto& loss : f.losses) {
    if (std::find(std::begin(kFixed), std::end(kFixed), loss.name) != std::end(kFixed) ||
        j.contains(loss.name)) {
      throw Error("metrics record: loss name \"" + loss.name +
                  "\" collides with another key of the training record");
    }
    j[loss.name] = number_or_null(loss.value);
  }
  j["loss_scale"] = number_or_null(f.loss_scale);
  j["grad_norm"] = f.grad_norm ? number_or_null(*f.grad_norm) : Json(nullptr);
  j["skipped_iterations"] = f.skipped_iterations;
  j["nan_iterations"] = f.nan_iterations;
  return j.dump();
}

std::string validation_metrics_json(std::int64_t iteration, EvalKind kind,
                                    const std::vector<NamedLoss>& losses) {
  Json j;
  j["record"] = "validation";
  j["iteration"] = iteration;
  j["set"] = kind == EvalKind::final_test ? "test" : "validation";
  j["final"] = kind != EvalKind::periodic;
  for (const auto& loss : losses) {
    if (j.contains(loss.name) || j.contains(loss.name + " PPL")) {
      throw Error("metrics record: loss name \"" + loss.name +
                  "\" collides with another key of the validation record");
    }
    j[loss.name] = number_or_null(loss.value);
    j[loss.name + " PPL"] = number_or_null(perplexity(loss.value));
  }
  return j.dump();
}

}  // namespace megatron::train
