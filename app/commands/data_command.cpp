// `megatron-app data --config FILE`: builds the [data] plugin with the split sizes training would
// ask for and prints the first samples of a split, in the order the training loop consumes them.
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli.h"
#include "commands/commands.h"
#include "megatron/dataset.h"
#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/train/batch_schedule.h"
#include "megatron/train/sample_counts.h"
#include "plugin_objects.h"
#include "session.h"

namespace megatron::app {

namespace po = boost::program_options;

namespace {

struct DataOptions {
  std::string split = "train";
  std::int64_t first = 10;
  bool text = false;
};

data::Split parse_split_name(const std::string& name) {
  for (data::Split split : data::kSplits) {
    if (data::split_name(split) == name) return split;
  }
  throw UsageError("megatron-app data: --split: expected train, valid or test, found '" + name +
                   "'");
}

// Where the loop consumes sample `k` of `split`: the iteration (train) or evaluation step, then
// the micro-batch and data-parallel rank within it (Megatron's sampler: each micro-step takes
// micro x data-parallel consecutive samples, rank r the r-th run of micro of them).
std::string consumed_at(data::Split split, std::int64_t k, const train::BatchSchedule& batches,
                        std::int64_t eval_iters) {
  const std::int64_t mbs = batches.micro_batch_size();
  const std::int64_t dp = batches.data_parallel_size();
  std::string step;
  std::int64_t offset = 0;
  if (split == data::Split::kTrain) {
    std::int64_t iteration = 0, consumed = 0;
    for (;;) {
      const std::int64_t batch = batches.at(consumed).running_global_batch_size;
      if (k < consumed + batch) break;
      consumed += batch;
      ++iteration;
    }
    step = fmt::format("iteration {}", iteration);
    offset = k - consumed;
  } else {
    const std::int64_t gbs = batches.global_batch_size();
    const std::int64_t per_evaluation = std::max<std::int64_t>(1, eval_iters) * gbs;
    step = split == data::Split::kValid ? fmt::format("evaluation {} step {}", k / per_evaluation,
                                                      (k % per_evaluation) / gbs)
                                        : fmt::format("step {}", k / gbs);
    offset = k % gbs;
  }
  return fmt::format("{}, micro-batch {}, data-parallel rank {}", step, offset / (mbs * dp),
                     (offset % (mbs * dp)) / mbs);
}

// One field of one sample, readably: token ids as ids or (--text) decoded text, labels with their
// positions (negative = no target), masks as the positions that are set, values as numbers.
std::string show_field(const FieldSpec& f, const Tensor& row, const Tokenizer& tokenizer,
                       bool text) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(row.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i);
    switch (f.dtype) {
      case DType::i32:
        v[i] = row.data<std::int32_t>()[k];
        break;
      case DType::i64:
        v[i] = row.data<std::int64_t>()[k];
        break;
      case DType::u8:
        v[i] = row.data<std::uint8_t>()[k];
        break;
      case DType::f32:
        v[i] = static_cast<std::int64_t>(row.data<float>()[k]);
        break;
      default:
        return "(" + std::string(dtype_name(f.dtype)) + ")";
    }
  }
  auto ids = [&](auto first, auto last) {
    std::vector<TokenId> out;
    for (auto it = first; it != last; ++it)
      out.push_back(static_cast<TokenId>(*it));
    return out;
  };
  switch (f.kind) {
    case FieldKind::token_ids:
      if (text) return "(text):\n" + tokenizer.decode(ids(v.begin(), v.end()));
      return fmt::format("{}", fmt::join(v, " "));
    case FieldKind::labels: {
      std::vector<std::string> targets;
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] < 0) continue;
        const std::vector<TokenId> one{static_cast<TokenId>(v[i])};
        targets.push_back(text ? fmt::format("{}:{:?}", i, tokenizer.decode(one))
                               : fmt::format("{}:{}", i, v[i]));
      }
      if (targets.size() == v.size() && !text) return fmt::format("{}", fmt::join(v, " "));
      return fmt::format("{} targets: {}", targets.size(), fmt::join(targets, " "));
    }
    case FieldKind::mask: {
      // Whichever list is shorter: the positions that are set, or those that are not.
      std::vector<std::size_t> on, off;
      for (std::size_t i = 0; i < v.size(); ++i)
        (v[i] != 0 ? on : off).push_back(i);
      if (off.empty()) return fmt::format("all {} set", v.size());
      if (on.empty()) return fmt::format("none of {} set", v.size());
      if (on.size() <= off.size())
        return fmt::format("{} of {} set, at {}", on.size(), v.size(), fmt::join(on, " "));
      return fmt::format("{} of {} set; 0 at {}", on.size(), v.size(), fmt::join(off, " "));
    }
    case FieldKind::value:
      break;
  }
  return fmt::format("{}", fmt::join(v, " "));
}

void print_samples(const Dataset& dataset, data::Split split, const DataOptions& options,
                   const train::BatchSchedule& batches, std::int64_t eval_iters) {
  const std::int64_t count = std::min(options.first, dataset.size(split));
  const SampleSpec spec = dataset.sample_fields();
  Batch one = Batch::allocate(spec, 1);
  for (std::int64_t k = 0; k < count; ++k) {
    dataset.get(split, k, one.sample(0));
    std::cout << fmt::format("sample {} | {}\n", k, consumed_at(split, k, batches, eval_iters));
    for (const FieldSpec& f : spec) {
      const std::string shown =
          show_field(f, one[f.name].select(0, 0), dataset.tokenizer(), options.text);
      // "tokens (text):" then the text on its own lines; "tokens: 1 2 3" otherwise.
      std::cout << "  " << f.name << (shown.starts_with("(text)") ? " " : ": ") << shown << "\n";
    }
  }
}

}  // namespace

int run_data(MpiRuntime& runtime, const std::vector<std::string>& args) {
  CommonOptions common;
  DataOptions options;
  po::options_description description(
      "megatron-app data --config FILE [--split train|valid|test] [--first N] [--text]\n"
      "Builds the [data] plugin with the split sizes training would ask for (its index caches\n"
      "included) and prints the split sizes and the first N samples of a split, in the order the\n"
      "training loop consumes them: train sample k in iteration k / global batch size (counted\n"
      "from 0; the training log counts from 1), valid and test samples global batch by global\n"
      "batch in each evaluation. Within a step, each micro-step takes micro_batch_size x\n"
      "data-parallel size consecutive samples, micro_batch_size of them per data-parallel rank.\n\n"
      "Options");
  add_common_options(description, common, true);
  description.add_options()  //
      ("split", po::value(&options.split)->default_value("train")->value_name("NAME"),
       "train, valid or test")  //
      ("first", po::value(&options.first)->default_value(10)->value_name("N"),
       "how many samples to print (0: only the sizes)")  //
      ("text", po::bool_switch(&options.text), "print the samples as text instead of token ids");
  parse_arguments("data", args, description, common.help);
  if (common.help) {
    std::cout << description << "\n";
    return 0;
  }
  const data::Split split = parse_split_name(options.split);
  if (options.first < 0) {
    throw UsageError("megatron-app data: --first: expected 0 or more, found " +
                     std::to_string(options.first));
  }

  Session session = open_session(runtime, common, {});
  if (common.print_config) {
    if (runtime.world_rank() == 0) std::cout << session.config.to_toml();
    return 0;
  }
  const SelectedPlugin* selected = session.selected_for("data");
  if (!selected) {
    throw UsageError("megatron-app data: the config has no [data] table naming a dataset plugin");
  }

  const config::CoreConfig& core = session.config.core();
  ParallelState parallel = ParallelState::create(runtime, parallel_sizes(core.parallel));
  const train::BatchSchedule batches =
      train::BatchSchedule::from_config(core.training, parallel.dp_size());
  const std::int64_t gbs = batches.global_batch_size();
  const std::array<std::int64_t, 3> wanted =
      train::train_valid_test_num_samples(core.training, gbs);

  auto dataset =
      create_plugin<Dataset>(session, parallel, "data", "megatron::Dataset", "type = \"gpt\"");
  dataset->build(wanted);
  if (runtime.world_rank() != 0) return 0;

  std::cout << fmt::format(
      "[data] type = \"{}\", seq_length {}; global batch size {} (micro batch {} x data-parallel "
      "{}{})\n",
      selected->record->name, dataset->seq_length(), gbs, batches.micro_batch_size(),
      batches.data_parallel_size(), batches.has_rampup() ? ", after the ramp-up" : "");
  std::cout << "split sizes (samples built / asked for by the schedule):";
  for (data::Split s : data::kSplits) {
    std::cout << fmt::format(" {} {}/{}", data::split_name(s), dataset->size(s),
                             wanted[static_cast<std::size_t>(s)]);
  }
  std::cout << "\n";
  if (dataset->size(split) == 0) {
    std::cout << "the " << data::split_name(split) << " split is empty\n";
    return 0;
  }
  print_samples(*dataset, split, options, batches, core.training.eval_iters);
  return 0;
}

}  // namespace megatron::app
