// Fine-tuning and evaluation of task heads (megatron/tasks/classifier_finetuning.h): Megatron's
// finetune_utils (sampler, epochs, checkpoints) over the core's Trainer, and eval_utils'
// accuracy over the forward runner.
#include "megatron/tasks/classifier_finetuning.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "megatron/data/numpy_random.h"
#include "megatron/dataset.h"
#include "megatron/error.h"
#include "megatron/optimizer.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/tasks/task_options.h"
#include "megatron/train/forward_runner.h"
#include "megatron/train/model_setup.h"
#include "megatron/train/pretrained.h"
#include "megatron/train/trainer.h"

namespace megatron::tasks {

namespace {

// The task's samples as a Dataset the trainer reads: train = the training set, valid = every
// validation set in order (the periodic validation loss), no test split.
class LabelledDataset final : public Dataset {
 public:
  LabelledDataset(const std::vector<LabelledSample>& train, const std::vector<LabelledSet>& valid,
                  std::int64_t sequences, std::int64_t seq_length, const Tokenizer& tokenizer)
      : train_(train), sequences_(sequences), seq_length_(seq_length), tokenizer_(tokenizer) {
    for (const LabelledSet& set : valid)
      for (const LabelledSample& s : set.samples)
        valid_.push_back(&s);
  }

  SampleSpec sample_fields() const override {
    const Shape shape = sequences_ > 1 ? Shape{sequences_, seq_length_} : Shape{seq_length_};
    return {{"text", DType::i32, shape, FieldKind::token_ids},
            {"types", DType::i32, shape, FieldKind::value},
            {"padding_mask", DType::i32, shape, FieldKind::mask},
            {"label", DType::i32, {}, FieldKind::value}};
  }
  void build(const std::array<std::int64_t, 3>&) override {}  // the samples are in memory
  std::int64_t size(data::Split split) const override {
    return split == data::Split::kTrain   ? static_cast<std::int64_t>(train_.size())
           : split == data::Split::kValid ? static_cast<std::int64_t>(valid_.size())
                                          : 0;
  }
  std::int64_t seq_length() const override { return seq_length_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  void get(data::Split split, std::int64_t index, const SampleSlots& out) const override {
    const auto i = static_cast<std::size_t>(index);
    fill(split == data::Split::kTrain ? train_[i] : *valid_[i], out);
  }

  static void fill(const LabelledSample& s, const SampleSlots& out) {
    auto text = out.i32("text"), types = out.i32("types"), padding = out.i32("padding_mask");
    std::size_t at = 0;
    for (const TokenSequence& q : s.sequences) {
      for (std::size_t j = 0; j < q.ids.size(); ++j, ++at) {
        text[at] = q.ids[j];
        types[at] = q.types[j];
        padding[at] = q.paddings[j];
      }
    }
    out.i32("label")[0] = s.label;
  }

 private:
  const std::vector<LabelledSample>& train_;
  std::vector<const LabelledSample*> valid_;
  std::int64_t sequences_, seq_length_;
  const Tokenizer& tokenizer_;
};

// DistributedSampler-like order of one epoch on one data-parallel rank: a permutation of the
// training set from seed + epoch (numpy's RandomState, not torch's randperm), padded by repeating
// its start to a multiple of the data-parallel size, every dp-th index from the rank's own.
std::vector<std::int64_t> epoch_order(std::int64_t n, std::int64_t seed, std::int64_t dp,
                                      std::int64_t rank) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    order[static_cast<std::size_t>(i)] = i;
  data::NumpyRandomState rng(seed);
  rng.shuffle(std::span<std::int64_t>(order));
  const std::int64_t total = (n + dp - 1) / dp * dp;
  std::vector<std::int64_t> mine;
  for (std::int64_t k = rank; k < total; k += dp)
    mine.push_back(order[static_cast<std::size_t>(k % n)]);
  return mine;
}

// Megatron's output_predictions for one set: every sample's softmax over its classes or choices
// (and, not Megatron's, the scores themselves, for checks), and its label.
nlohmann::ordered_json output_predictions(const Tensor& logits, const LabelledSet& set) {
  const auto n = static_cast<std::int64_t>(set.samples.size());
  const std::int64_t k = logits.size(1);
  const std::vector<float> values = logits.to_vector<float>();
  nlohmann::ordered_json softmaxes = nlohmann::ordered_json::array(),
                         raw = nlohmann::ordered_json::array(),
                         labels = nlohmann::ordered_json::array();
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = values.data() + i * k;
    const double top = *std::max_element(row, row + k);
    double z = 0;
    for (std::int64_t c = 0; c < k; ++c)
      z += std::exp(static_cast<double>(row[c]) - top);
    std::vector<double> p;
    for (std::int64_t c = 0; c < k; ++c)
      p.push_back(std::exp(static_cast<double>(row[c]) - top) / z);
    softmaxes.push_back(p);
    raw.push_back(std::vector<float>(row, row + k));
    labels.push_back(set.samples[static_cast<std::size_t>(i)].label);
  }
  return {{"softmaxes", softmaxes}, {"logits", raw}, {"labels", labels}};
}

struct SetEvaluation {
  SetAccuracy accuracy;
  double seconds = 0;
  nlohmann::ordered_json predictions = nlohmann::ordered_json::object();
};

// eval_utils' accuracy of one set: each sample once, micro-batches dealt to the data-parallel
// replicas in turn (the last one filled up with copies whose answers are not counted); with
// `predictions` (evaluation only, one data-parallel rank), output_predictions too.
SetEvaluation evaluate_set(Model& model, ParallelState& parallel, const config::CoreConfig& core,
                           const SampleSpec& fields, const LabelledSet& set, bool predictions) {
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t mbs = core.training.micro_batch_size;
  const auto n = static_cast<std::int64_t>(set.samples.size());
  const std::int64_t dp = parallel.dp_size();
  std::vector<Batch> batches;
  std::vector<std::int64_t> first;
  for (std::int64_t k = parallel.dp_rank(); k * mbs < n; k += dp) {
    Batch b = Batch::allocate(fields, mbs);
    for (std::int64_t i = 0; i < mbs; ++i) {
      const std::int64_t index = std::min(k * mbs + i, n - 1);
      LabelledDataset::fill(set.samples[static_cast<std::size_t>(index)], b.sample(i));
    }
    batches.push_back(std::move(b));
    first.push_back(k * mbs);
  }
  train::ForwardRunner runner(model, parallel, core);
  const StepResult r = runner.run(batches, true);
  std::vector<double> counts = {0, 0};
  if (!batches.empty()) {
    const std::vector<std::int64_t> predicted =
        named_tensor(r.outputs, "prediction", "the model's outputs").to_vector<std::int64_t>();
    for (std::size_t b = 0; b < batches.size(); ++b) {
      for (std::int64_t i = 0; i < mbs && first[b] + i < n; ++i) {
        const auto index = static_cast<std::size_t>(first[b] + i);
        counts[0] += predicted[b * static_cast<std::size_t>(mbs) + static_cast<std::size_t>(i)] ==
                     set.samples[index].label;
        counts[1] += 1;
      }
    }
  }
  parallel.comm(Group::data).all_reduce(std::span<double>(counts), ReduceOp::sum);
  SetEvaluation out;
  out.accuracy = {set.name, static_cast<std::int64_t>(counts[0]),
                  static_cast<std::int64_t>(counts[1])};
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (predictions && dp == 1 && !batches.empty()) {
    out.predictions =
        output_predictions(named_tensor(r.outputs, "logits", "the model's outputs"), set);
  }
  return out;
}

// The accuracies after each epoch (or of the pretrained model, epoch -1), printed in Megatron's
// lines by the last rank and kept for the results file.
class EpochReports {
 public:
  EpochReports(Model& model, PluginContext& context, SampleSpec fields,
               const std::vector<LabelledSet>& valid, bool predictions)
      : model_(model),
        context_(context),
        fields_(std::move(fields)),
        valid_(valid),
        predictions_(predictions),
        last_rank_(context.parallel.world_rank() == context.parallel.world_size() - 1) {}

  void report(std::int64_t epoch) {
    if (last_rank_) std::cout << "calculating metrics ..." << std::endl;
    nlohmann::ordered_json sets = nlohmann::ordered_json::array();
    std::int64_t correct = 0, total = 0;
    for (const LabelledSet& set : valid_) {
      const SetEvaluation e =
          evaluate_set(model_, context_.parallel, context_.core, fields_, set, predictions_);
      const SetAccuracy& acc = e.accuracy;
      correct += acc.correct;
      total += acc.total;
      const double percent =
          acc.total ? 100.0 * static_cast<double>(acc.correct) / static_cast<double>(acc.total)
                    : 0.0;
      if (last_rank_) {
        std::cout << fmt::format(
                         " > |epoch: {}| metrics for {}: correct / total = {} / {} = {:.4f} %, "
                         "elapsed time (sec): {:.3f}",
                         epoch, acc.name, acc.correct, acc.total, percent, e.seconds)
                  << std::endl;
      }
      nlohmann::ordered_json entry = {{"name", acc.name},
                                      {"correct", acc.correct},
                                      {"total", acc.total},
                                      {"accuracy", percent / 100.0}};
      for (const auto& [key, value] : e.predictions.items())
        entry[key] = value;
      sets.push_back(std::move(entry));
    }
    last_overall_ = total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
    if (last_rank_) {
      std::cout << fmt::format(" >> |epoch: {}| overall: correct / total = {} / {} = {:.4f} %",
                               epoch, correct, total, 100.0 * last_overall_)
                << std::endl;
    }
    history_.push_back({{"epoch", epoch},
                        {"sets", sets},
                        {"correct", correct},
                        {"total", total},
                        {"accuracy", last_overall_}});
  }
  double last_overall() const { return last_overall_; }
  const nlohmann::ordered_json& history() const { return history_; }

 private:
  Model& model_;
  PluginContext& context_;
  SampleSpec fields_;
  const std::vector<LabelledSet>& valid_;
  bool predictions_;
  bool last_rank_;
  nlohmann::ordered_json history_ = nlohmann::ordered_json::array();
  double last_overall_ = 0;
};

// finetune_utils' epochs over `n` training samples: iterations per epoch on each data-parallel
// rank (a partial last batch kept or dropped) and each iteration's samples of the epoch's order.
train::FinetuneSchedule epoch_schedule(std::int64_t n, std::int64_t epochs, std::int64_t mbs,
                                       bool keep_last, std::int64_t seed, std::int64_t dp,
                                       std::int64_t dp_rank) {
  train::FinetuneSchedule schedule;
  const std::int64_t per_rank = (n + dp - 1) / dp;
  schedule.epochs = epochs;
  schedule.iterations_per_epoch = keep_last ? (per_rank + mbs - 1) / mbs : per_rank / mbs;
  const std::int64_t per_epoch = schedule.iterations_per_epoch;
  schedule.train_samples = [=, order = std::vector<std::int64_t>(),
                            order_epoch = std::int64_t{-1}](std::int64_t iteration) mutable {
    const std::int64_t epoch = iteration / per_epoch, b = iteration % per_epoch;
    if (epoch != order_epoch) {
      order = epoch_order(n, seed + epoch, dp, dp_rank);  // set_epoch(seed + epoch)
      order_epoch = epoch;
    }
    const auto begin = static_cast<std::size_t>(b * mbs);
    const std::size_t end = std::min(order.size(), begin + static_cast<std::size_t>(mbs));
    return std::vector<std::int64_t>(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                     order.begin() + static_cast<std::ptrdiff_t>(end));
  };
  return schedule;
}

}  // namespace

void declare_finetuning_keys(config::TableSchema& s) {
  s.path_list("train_data", "training data (Megatron's --train-data)")
      .path_list("valid_data", "validation data, each reported on its own (--valid-data)")
      .integer("epochs", 3, "fine-tuning epochs; 0 evaluates the pretrained checkpoint only",
               config::Range::at_least(0))
      .boolean("keep_last", false,
               "keep the last, partial training batch of each epoch (--keep-last)");
}

ClassifierFinetuning::ClassifierFinetuning(PluginContext& context, TaskHost& host,
                                           std::string task_name, TaskHead head,
                                           const Tokenizer& tokenizer, std::int64_t seq_length)
    : context_(context),
      host_(host),
      task_name_(std::move(task_name)),
      head_(head),
      tokenizer_(tokenizer),
      seq_length_(seq_length) {}

TaskResult ClassifierFinetuning::run(const std::vector<LabelledSample>& train,
                                     const std::vector<LabelledSet>& valid) {
  ParallelState& parallel = context_.parallel;
  const config::ConfigTable& t = context_.config;
  const bool last_rank = parallel.world_rank() == parallel.world_size() - 1;
  const std::int64_t epochs = t.integer("epochs");
  const std::int64_t sequences =
      head_.kind == TaskHead::Kind::multiple_choice ? head_.num_classes : 1;

  std::unique_ptr<Model> model = host_.create_model();
  const TaskHeadParameters names = model->select_head(head_);
  LabelledDataset dataset(train, valid, sequences, seq_length_, tokenizer_);
  check_sample_fields(model->input_fields(), host_.model_type(), dataset.sample_fields(),
                      task_name_);
  train::PretrainedRules rules;
  rules.initialise = names.added;
  rules.skip = names.dropped;
  rules.model_type = host_.model_type();
  auto load_pretrained = [&](const std::filesystem::path& checkpoint) {
    train::load_pretrained(checkpoint, *model, parallel, rules, context_.log);
  };
  EpochReports reports(*model, context_, dataset.sample_fields(), valid, epochs == 0);

  if (epochs == 0) {
    // finetune(): evaluation only, epoch -1.
    model->build(train::model_build_info(parallel, context_.core, *model,
                                         static_cast<std::int64_t>(tokenizer_.vocab_size()),
                                         seq_length_, dataset.sample_fields()));
    context_.log.info("{}", model->describe());
    load_pretrained(task_checkpoint(context_));
    if (last_rank) std::cout << "evaluation only mode, setting epoch to -1" << std::endl;
    reports.report(-1);
  } else {
    const std::int64_t dp = parallel.dp_size(), n = static_cast<std::int64_t>(train.size());
    const std::int64_t mbs = context_.core.training.micro_batch_size;
    train::FinetuneSchedule schedule =
        epoch_schedule(n, epochs, mbs, t.boolean("keep_last"), context_.core.training.seed, dp,
                       parallel.dp_rank());
    if (schedule.iterations_per_epoch == 0) {
      t.fail("train_data", std::to_string(n) + " training samples make no batch of " +
                               std::to_string(mbs) + " per data-parallel rank (" +
                               std::to_string(dp) +
                               " ranks); set keep_last = true or use more "
                               "data");
    }
    if (!t.has("pretrained_checkpoint")) {
      t.fail("pretrained_checkpoint",
             "required key is missing: fine-tuning starts from a pretrained checkpoint");
    }
    const std::filesystem::path pretrained = task_checkpoint(context_);
    schedule.initialise = [&] { load_pretrained(pretrained); };
    schedule.end_of_epoch = [&](std::int64_t epoch) { reports.report(epoch); };
    std::unique_ptr<Optimizer> optimizer = host_.create_optimizer();
    if (last_rank) {
      std::cout << fmt::format("{}: {} training samples, {} iterations per epoch, {} epochs",
                               task_name_, n, schedule.iterations_per_epoch, epochs)
                << std::endl;
    }
    train::Trainer trainer({context_.log, parallel, context_.core, host_.config_toml()}, *model,
                           *optimizer, dataset, std::move(schedule));
    trainer.run();
  }

  nlohmann::ordered_json out = {{"task", task_name_}, {"epochs", reports.history()}};
  if (!reports.history().empty()) out["accuracy"] = reports.history().back()["accuracy"];
  write_task_results_json(context_, out.dump(2));
  return {{{"accuracy", reports.last_overall()}}};
}

}  // namespace megatron::tasks
