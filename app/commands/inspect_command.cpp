// `megatron-app inspect PATH`: a checkpoint's attributes, config and per-tensor statistics; one
// tensor's values (--tensor); or a comparison with another checkpoint (--diff, exit 1 if differ).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli.h"
#include "commands/checkpoint_diff.h"
#include "commands/commands.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/config/validate.h"
#include "megatron/error.h"

namespace megatron::app {

namespace {

namespace po = boost::program_options;
using checkpoint::CheckpointState;

struct InspectOptions {
  std::string path;
  std::string tensor;
  std::string diff;
  std::int64_t limit = 20;
  bool config = false;
  bool verify = false;
};

struct Stats {
  double min = 0, max = 0, mean = 0, std = 0, l2 = 0;
  bool nan = false;
};

// In double, two passes (mean, then spread); NaN anywhere makes every statistic NaN.
Stats tensor_stats(const Tensor& t) {
  Stats s;
  const std::int64_t n = t.numel();
  if (n == 0) return s;
  const void* data = t.raw_data();
  double sum = 0, squares = 0;
  s.min = std::numeric_limits<double>::infinity(), s.max = -s.min;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = load_as_double(data, t.dtype(), i);
    s.nan = s.nan || std::isnan(v);
    s.min = std::min(s.min, v), s.max = std::max(s.max, v);
    sum += v, squares += v * v;
  }
  s.mean = sum / double(n);
  double spread = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = load_as_double(data, t.dtype(), i) - s.mean;
    spread += d * d;
  }
  s.std = std::sqrt(spread / double(n));
  s.l2 = std::sqrt(squares);
  if (s.nan) s.min = s.max = s.mean = s.std = s.l2 = std::numeric_limits<double>::quiet_NaN();
  return s;
}

// Lines of the stored config's [model] table (and [model.*] sub-tables).
std::vector<std::string> model_table_lines(const std::string& config) {
  std::vector<std::string> lines;
  std::istringstream in(config);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("[")) inside = line == "[model]" || line.starts_with("[model.");
    if (inside && !line.empty()) lines.push_back(line);
  }
  return lines;
}

void print_config(const CheckpointState& state, bool whole) {
  if (state.config_toml.empty()) {
    std::cout << "config:             (none stored)\n";
    return;
  }
  const auto model = model_table_lines(state.config_toml);
  if (!whole && model.empty()) {
    std::cout << "config:             no [model] table (--config prints the whole config)\n";
    return;
  }
  std::cout << (whole ? "config:\n" : "config (--config prints all of it):\n");
  std::istringstream in(state.config_toml);
  if (whole) {
    for (std::string line; std::getline(in, line);)
      std::cout << "  " << line << "\n";
  } else {
    for (const auto& line : model)
      std::cout << "  " << line << "\n";
  }
}

std::string number(double v) {
  return fmt::format("{:.6g}", v);
}

void print_summary(const std::filesystem::path& file, const CheckpointState& state, bool config) {
  std::cout << fmt::format("file:               {}\n", file.string());
  std::cout << fmt::format("format version:     {}\n", state.format_version);
  std::cout << fmt::format("iteration:          {}\n", state.iteration);
  std::cout << fmt::format("consumed samples:   train {}, valid {}\n", state.consumed_train_samples,
                           state.consumed_valid_samples);
  std::cout << fmt::format("skipped iterations: {}\n", state.skipped_iterations);
  const auto& ints = state.int_attributes;
  if (ints.count("layout.data_parallel_size")) {
    // Metadata only: the tensors are stored at global shape and load at any layout.
    auto get = [&](const char* key, std::int64_t fallback = 1) {
      return ints.count(key) ? ints.at(key) : fallback;
    };
    const std::int64_t context = get("layout.context_parallel_size");
    std::cout << fmt::format(
        "saved at layout:    tensor {} x pipeline {}{} x data {}{} (loads at any layout)\n",
        get("layout.tensor_model_parallel_size"), get("layout.pipeline_model_parallel_size"),
        context > 1 ? fmt::format(" x context {}", context) : std::string(),
        get("layout.data_parallel_size"),
        get("layout.use_distributed_optimizer", 0) ? ", distributed optimizer" : "");
  }
  for (const auto& [key, value] : state.int_attributes)
    std::cout << fmt::format("attribute:          {} = {}\n", key, value);
  for (const auto& [key, value] : state.float_attributes)
    std::cout << fmt::format("attribute:          {} = {}\n", key, value);
  print_config(state, config);

  std::size_t name_width = 4, shape_width = 5;
  for (const auto& [name, tensor] : state.tensors) {
    name_width = std::max(name_width, name.size());
    shape_width = std::max(shape_width, shape_str(tensor.shape()).size());
  }
  std::cout << fmt::format("\n{} tensors:\n", state.tensors.size());
  std::cout << fmt::format(
      "{:<{}}  {:<{}}  {:<8}  {:>10}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}\n", "NAME", name_width,
      "SHAPE", shape_width, "DTYPE", "ELEMENTS", "MIN", "MAX", "MEAN", "STD", "L2");
  std::int64_t model_elements = 0, model_tensors = 0, with_nan = 0;
  for (const auto& [name, tensor] : state.tensors) {
    const Stats s = tensor_stats(tensor);
    with_nan += s.nan;
    if (name.starts_with("model/")) model_elements += tensor.numel(), ++model_tensors;
    const bool empty = tensor.numel() == 0;
    const auto stat = [&](double v) { return empty ? std::string("-") : number(v); };
    std::cout << fmt::format(
        "{:<{}}  {:<{}}  {:<8}  {:>10}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}\n", name, name_width,
        shape_str(tensor.shape()), shape_width, dtype_name(tensor.dtype()), tensor.numel(),
        stat(s.min), stat(s.max), stat(s.mean), stat(s.std), stat(s.l2));
  }
  std::cout << fmt::format("\nmodel parameters: {} ({} tensors under model/)\n", model_elements,
                           model_tensors);
  if (with_nan) std::cout << fmt::format("warning: {} tensors contain NaN\n", with_nan);
}

std::string element(const Tensor& t, std::int64_t i) {
  const double v = load_as_double(t.raw_data(), t.dtype(), i);
  switch (t.dtype()) {
    case DType::f64:
      return fmt::format("{}", v);
    case DType::f32:
    case DType::bf16:
    case DType::f16:
      return fmt::format("{}", static_cast<float>(v));  // shortest text that reads back exactly
    default:
      return fmt::format("{}", static_cast<std::int64_t>(v));
  }
}

// The values row by row (a row is the last dimension), the first `limit` of them (0: all).
void print_tensor(const CheckpointState& state, const std::string& wanted, std::int64_t limit) {
  auto found = state.tensors.find(wanted);
  if (found == state.tensors.end()) found = state.tensors.find("model/" + wanted);
  if (found == state.tensors.end()) {
    std::vector<std::string> names;
    for (const auto& [name, tensor] : state.tensors)
      names.push_back(name);
    const std::string guess = config::suggest(wanted, names);
    throw UsageError("no tensor '" + wanted + "' in the checkpoint" +
                     (guess.empty() ? "" : "; did you mean '" + guess + "'?") +
                     " (`megatron-app inspect PATH` lists them)");
  }
  const auto& [name, t] = *found;
  const std::int64_t n = t.numel();
  const std::int64_t shown = limit > 0 ? std::min(limit, n) : n;
  std::cout << fmt::format(
      "{}: {} {}, {} values{}\n", name, dtype_name(t.dtype()), shape_str(t.shape()), n,
      shown < n ? fmt::format(" (the first {}; --limit 0 shows all)", shown) : "");
  if (t.dim() == 0) {
    std::cout << "  " << element(t, 0) << "\n";
    return;
  }
  const std::int64_t row = t.shape().back();
  for (std::int64_t start = 0; start < shown; start += std::max<std::int64_t>(row, 1)) {
    // The index of the row: [i, j, :] for a rank-3 tensor.
    std::vector<std::string> index;
    std::int64_t rest = start / std::max<std::int64_t>(row, 1);
    for (int d = t.dim() - 2; d >= 0; --d) {
      index.insert(index.begin(), std::to_string(rest % t.shape()[d]));
      rest /= t.shape()[d];
    }
    index.push_back(":");
    std::string line = "  [" + fmt::format("{}", fmt::join(index, ", ")) + "]";
    for (std::int64_t i = start; i < std::min(start + row, shown); ++i)
      line += " " + element(t, i);
    if (start + row > shown && shown < n) line += " ...";
    std::cout << line << "\n";
  }
}

// The --verify report: 0 when every tensor passed its checksum, 1 when any did not.
int print_verification(const checkpoint::VerifyReport& report) {
  for (const std::string& damage : report.damaged)
    std::cout << "DAMAGED: " << damage << "\n";
  for (const std::string& name : report.unchecked)
    std::cout << "unchecked: '" << name << "' was saved without a checksum (an older file)\n";
  const std::string read =
      fmt::format("{} tensors, {:.1f} MiB", report.tensors, double(report.bytes) / double(1 << 20));
  if (report.intact()) {
    std::cout << report.file.string() << " (iteration " << report.iteration << "): " << read
              << (report.unchecked.empty() ? ", every tile matches its checksum"
                                           : ", readable; the tensors above are unverified")
              << "\n";
    return 0;
  }
  std::cout.flush();
  std::cerr << "megatron-app: error: " << report.file.string()
            << " is damaged: " << report.damaged.size() << " of " << report.tensors
            << " tensors fail their checksums; do not train from it\n";
  return 1;
}

InspectOptions parse_options(const std::vector<std::string>& args, bool& help,
                             po::options_description& visible) {
  InspectOptions o;
  visible.add_options()                                                                          //
      ("tensor", po::value(&o.tensor)->value_name("NAME"),                                       //
       "print one tensor's values (NAME with or without the leading \"model/\")")                //
      ("diff", po::value(&o.diff)->value_name("OTHER"),                                          //
       "compare with another checkpoint; exit code 0 identical, 1 different")                    //
      ("limit", po::value(&o.limit)->default_value(20)->value_name("N"),                         //
       "--tensor prints the first N values (0: all)")                                            //
      ("config", po::bool_switch(&o.config), "print the whole stored config, not just [model]")  //
      ("verify", po::bool_switch(&o.verify),                                                     //
       "read every tensor and check it against its checksum; exit code 0 intact, 1 damaged")     //
      ("help,h", "show this help");
  po::options_description all;
  all.add(visible).add_options()("path", po::value(&o.path), "checkpoint");
  po::positional_options_description positional;
  positional.add("path", 1);
  parse_arguments("inspect", args, all, help, &positional);
  if (help) return o;
  if (o.path.empty()) {
    throw UsageError(
        "megatron-app inspect: missing PATH, a checkpoint file or directory (see `megatron-app "
        "inspect --help`)");
  }
  if (o.limit < 0)
    throw UsageError("megatron-app inspect: --limit must be >= 0, got " + std::to_string(o.limit));
  if (int(!o.tensor.empty()) + int(!o.diff.empty()) + int(o.verify) > 1) {
    throw UsageError("megatron-app inspect: give one of --tensor, --diff and --verify");
  }
  return o;
}

}  // namespace

int run_inspect(MpiRuntime& runtime, const std::vector<std::string>& args) {
  po::options_description visible(
      "megatron-app inspect PATH [--tensor NAME | --diff OTHER | --verify] [--limit N] [--config]\n"
      "Shows a checkpoint (an iter_XXXXXXX.h5 file, or a directory's latest): iteration, consumed\n"
      "samples, the [model] part of its config, and for every tensor its shape, dtype, element\n"
      "count, min, max, mean, std and L2 norm, then the model's parameter count.\n"
      "With --diff, compares tensor by tensor and exits 0 when identical, 1 when they differ\n"
      "(attribute and config differences are noted but do not count); 2 for bad input.\n"
      "With --verify, reads every tensor so each tile is checked against the checksum written\n"
      "at save; exits 0 when intact, 1 naming every damaged tensor.\n\n"
      "Options");
  bool help = false;
  const InspectOptions options = parse_options(args, help, visible);
  if (help) {
    std::cout << visible << "\n";
    return 0;
  }
  if (runtime.world_size() > 1) {
    throw UsageError("megatron-app inspect runs as one process; found " +
                     std::to_string(runtime.world_size()) + " MPI ranks");
  }
  try {
    const std::filesystem::path file = checkpoint::resolve_checkpoint(options.path);
    if (options.verify) return print_verification(checkpoint::verify_checkpoint(file));
    const CheckpointState state = checkpoint::load_checkpoint(file);
    if (!options.diff.empty()) {
      const std::filesystem::path other_file = checkpoint::resolve_checkpoint(options.diff);
      const CheckpointState other = checkpoint::load_checkpoint(other_file);
      return print_checkpoint_diff(std::cout, file, state, other_file, other) == 0 ? 0 : 1;
    }
    if (!options.tensor.empty()) {
      print_tensor(state, options.tensor, options.limit);
    } else {
      print_summary(file, state, options.config);
    }
  } catch (const UsageError&) {
    throw;
  } catch (const CheckpointDamagedError& e) {
    std::cout.flush();
    std::cerr << "megatron-app: error: " << e.what()
              << " (`megatron-app inspect --verify` lists every damaged tensor)" << std::endl;
    return 2;
  } catch (const Error& e) {
    // A checkpoint that cannot be read is bad input here (exit 2, as diff does), not a failure.
    std::cout.flush();
    std::cerr << "megatron-app: error: " << e.what() << std::endl;
    return 2;
  }
  return 0;
}

}  // namespace megatron::app
