// Comparison of two checkpoints for `megatron-app inspect --diff`.
#include "commands/checkpoint_diff.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace megatron::app {

namespace {

using checkpoint::CheckpointState;

struct Difference {
  std::int64_t differing = 0;  // elements whose bits differ
  double max_abs = 0;
  double max_rel = 0;
};

// Element-wise over two contiguous host tensors of one dtype and shape. An element differs when
// its bits differ; NaN against a number counts as an infinite difference.
Difference compare(const Tensor& a, const Tensor& b) {
  Difference d;
  const std::size_t size = a.element_size();
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * std::int64_t(size), pb + i * std::int64_t(size), size) == 0) continue;
    ++d.differing;
    const double x = load_as_double(pa, a.dtype(), i), y = load_as_double(pb, b.dtype(), i);
    if (std::isnan(x) && std::isnan(y)) continue;
    const double abs =
        std::isnan(x) || std::isnan(y) ? std::numeric_limits<double>::infinity() : std::fabs(x - y);
    const double scale = std::max(std::fabs(x), std::fabs(y));
    const double rel = std::isinf(abs) ? abs : (scale > 0 ? abs / scale : 0);
    d.max_abs = std::max(d.max_abs, abs);
    d.max_rel = std::max(d.max_rel, rel);
  }
  return d;
}

void note_attributes(std::ostream& out, const CheckpointState& a, const CheckpointState& b) {
  const auto note = [&](const std::string& what, const auto& x, const auto& y) {
    if (x != y) out << fmt::format("note: {} differs: {} vs {}\n", what, x, y);
  };
  note("iteration", a.iteration, b.iteration);
  note("consumed_train_samples", a.consumed_train_samples, b.consumed_train_samples);
  note("consumed_valid_samples", a.consumed_valid_samples, b.consumed_valid_samples);
  note("skipped_iterations", a.skipped_iterations, b.skipped_iterations);
  if (a.config_toml != b.config_toml) out << "note: the stored configs differ\n";
  if (a.int_attributes != b.int_attributes || a.float_attributes != b.float_attributes) {
    out << "note: the int/float attributes differ\n";
  }
}

}  // namespace

int print_checkpoint_diff(std::ostream& out, const std::filesystem::path& file_a,
                          const CheckpointState& a, const std::filesystem::path& file_b,
                          const CheckpointState& b) {
  out << fmt::format("comparing {}\n     with {}\n", file_a.string(), file_b.string());
  note_attributes(out, a, b);

  std::vector<std::string> problems;
  std::vector<std::string> common;
  for (const auto& [name, tensor] : a.tensors) {
    const auto other = b.tensors.find(name);
    if (other == b.tensors.end()) {
      problems.push_back(fmt::format("only in {}: {}", file_a.string(), name));
    } else if (tensor.shape() != other->second.shape()) {
      problems.push_back(fmt::format("{}: shape {} vs {}", name, shape_str(tensor.shape()),
                                     shape_str(other->second.shape())));
    } else if (tensor.dtype() != other->second.dtype()) {
      problems.push_back(fmt::format("{}: dtype {} vs {}", name, dtype_name(tensor.dtype()),
                                     dtype_name(other->second.dtype())));
    } else {
      common.push_back(name);
    }
  }
  for (const auto& [name, tensor] : b.tensors) {
    if (!a.tensors.count(name))
      problems.push_back(fmt::format("only in {}: {}", file_b.string(), name));
  }

  int differing = int(problems.size());
  if (!common.empty()) {
    std::size_t width = 4;
    for (const auto& name : common)
      width = std::max(width, name.size());
    out << fmt::format("{:<{}}  {:>12}  {:>12}  {:>12}\n", "NAME", width, "MAX_ABS_DIFF",
                       "MAX_REL_DIFF", "DIFFERING");
    for (const auto& name : common) {
      const Tensor& x = a.tensors.at(name);
      const Difference d = compare(x, b.tensors.at(name));
      if (d.differing) ++differing;
      out << fmt::format("{:<{}}  {:>12.6g}  {:>12.6g}  {:>12}\n", name, width, d.max_abs,
                         d.max_rel, fmt::format("{}/{}", d.differing, x.numel()));
    }
  }
  for (const auto& problem : problems)
    out << problem << "\n";
  const std::size_t total = common.size() + problems.size();
  if (differing == 0) {
    out << fmt::format("identical: {} tensors with the same names, shapes, dtypes and values\n",
                       total);
  } else {
    out << fmt::format("{} tensor{} (of {})\n", differing, differing == 1 ? " differs" : "s differ",
                       total);
  }
  return differing;
}

}  // namespace megatron::app
