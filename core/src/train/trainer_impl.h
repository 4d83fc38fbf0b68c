// Trainer internals shared by the loop (trainer.cpp), its training step (train_step.cpp) and its
// checkpoint code (trainer_checkpoint.cpp).
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grad_buffer.h"
#include "megatron/backend/backend.h"
#include "megatron/train/batch_schedule.h"
#include "megatron/train/loss_scaler.h"
#include "megatron/train/lr_schedule.h"
#include "megatron/train/pipeline_schedule.h"
#include "megatron/train/train_log.h"
#include "megatron/train/trainer.h"
#include "progress_bar.h"

namespace megatron::train {

struct Trainer::Impl {
  Impl(TrainerServices s, Model& m, Optimizer& o, Dataset& d)
      : services(std::move(s)), model(m), optimizer(o), dataset(d) {}

  TrainerServices services;
  Model& model;
  Optimizer& optimizer;
  Dataset& dataset;
  std::optional<FinetuneSchedule> finetune;  // fine-tuning task's schedule, if any

  Device device = Device::cpu();
  SampleSpec sample_fields;  // the dataset's, read once
  std::optional<BatchSchedule> batches;
  std::optional<OptimizerParamScheduler> scheduler;
  std::unique_ptr<LossScaler> scaler;
  std::int64_t train_iters = 0;
  // Gradient (and, with the distributed optimizer, parameter) buffers and their reduction.
  std::unique_ptr<GradBuffers> ddp;

  // The run's settings, fixed by setup() (trainer.cpp).
  config::TrainingConfig training;  // [training], with fine-tuning's length
  PipelineLayout pipeline;
  DdpSettings ddp_settings;
  std::set<std::int64_t> injected_nan;  // MEGATRON_TEST_NAN_ITERATIONS (1-based iterations)
  bool logs_here = false;               // the last rank prints the log and the metrics file
  double peak_tflops = 0;               // the MFU's denominator, on that rank
  std::ofstream metrics;                // [logging] metrics_file, on that rank
  ProgressBar bar{false};

  // Progress, all saved in checkpoints.
  std::int64_t iteration = 0;
  std::int64_t consumed_train = 0;
  std::int64_t consumed_valid = 0;
  std::int64_t skipped_iterations = 0;
  std::int64_t optimizer_steps = 0;  // applied updates (Adam's bias-correction step)
  std::uint64_t seed = 1234;         // dropout seed

  // The loop's bookkeeping (trainer.cpp): the figures since the last log line, and the saves.
  struct Interval {
    std::vector<NamedLoss> losses;  // per term, the sum of each iteration's value
    std::int64_t iterations = 0, nan = 0, skipped = 0;
    std::optional<double> last_grad_norm;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  };
  struct Saves {
    std::int64_t last_saved = -1, last_attempt = -1;
    std::optional<std::string> unsaved;  // why the latest save failed, until one succeeds
  };
  Interval interval;
  Saves saves;
  std::int64_t consecutive_nan = 0;  // NaN/Inf steps skipped in a row (not overflow skips)

  // Before the loop (trainer.cpp): the run's length and batches, datasets, the model, gradient
  // buffers and optimizer, the MFU's peak, a resumed checkpoint, the metrics file.
  void setup();
  // An evaluation of `split` printed in Megatron's box (and the metrics file) by the last rank.
  void report_evaluation(data::Split split, EvalKind kind, std::int64_t& position);
  // A checkpoint of this iteration; a failed save is logged (or thrown, with exit_on_save_failure).
  void save_now(TrainSummary& summary);
  // Whether the loop stops after this iteration, saving and evaluating as Megatron's train does
  // between steps; throws when too many NaN/Inf steps came in a row.
  bool between_steps(TrainSummary& summary);

  // What one training step did (train_step.cpp).
  struct StepOutcome {
    BatchSizes sizes;
    StepResult sums;        // loss figures, summed over micro-batches and data x context ranks
    double loss = 0;        // sums.objective()
    double grad_norm = 0;   // before clipping
    bool skipped = false;   // no optimizer step: a loss-scale overflow, or NaN/Inf
    bool nan_skip = false;  // skipped for NaN/Inf (no loss scaler)
  };
  // One training step (Megatron's train_step): zero the gradients, run the micro-batches,
  // reduce the gradients, then unscale, check for NaN/Inf, clip and step the optimizer (or skip);
  // advances iteration and consumed_train.
  StepOutcome train_step();
  // The step's forward and backward passes and the gradient reduction; returns the loss figures.
  StepResult accumulate_gradients(const BatchSizes& sizes, float loss_scale);
  // Unscale, NaN/Inf check, clipping and the optimizer step (or the skip) of `step`.
  void apply_gradients(StepOutcome& step, float loss_scale);
  // One evaluation pass of eval_iters global batches of `split` from sample `position` (moved on).
  StepResult evaluate(data::Split split, std::int64_t& position);
  // After a step (trainer.cpp): the interval's sums, skip warnings, and Megatron's log line when
  // it is due.
  void log_step(const StepOutcome& step, TrainSummary& summary);

  // Checkpoint I/O (trainer_checkpoint.cpp).
  std::string save_checkpoint();
  // Resumes from [checkpoint] load (falling back past damaged checkpoints when configured).
  void load_checkpoint();
  void load_checkpoint_file(const std::filesystem::path& path);

  // Micro-batch k of the global batch that starts at sample `position` of `split`, as this
  // data-parallel rank reads it.
  Batch micro_batch(data::Split split, std::int64_t position, std::int64_t k,
                    std::int64_t micro_batch_size) const;
  // These samples of `split` as one micro-batch.
  Batch gather(data::Split split, const std::vector<std::int64_t>& indices) const;
  // What of a micro-batch this rank computes: the whole batch, or its context-parallel share
  // (nn::context_parallel_batch).
  Batch held_share(Batch b) const;
};

}  // namespace megatron::train
