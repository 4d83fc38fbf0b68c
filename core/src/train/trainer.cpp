// The training loop (Megatron's train / train_step / evaluate) over the plugin interfaces.
#include "megatron/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>

#include "grad_norm.h"
#include "megatron/error.h"
#include "megatron/nn/context_parallelism.h"
#include "megatron/nn/init.h"
#include "megatron/train/model_setup.h"
#include "megatron/train/peak_flops.h"
#include "megatron/train/sample_counts.h"
#include "megatron/train/train_log.h"
#include "pipeline_executor.h"
#include "progress_bar.h"
#include "trainer_impl.h"

namespace megatron::train {

namespace {

// Fault injection for the reliability tests: MEGATRON_TEST_NAN_ITERATIONS="5,6" poisons the
// gradients of those (1-based) iterations with NaN, so the detection and skip path runs for real.
std::set<std::int64_t> injected_nan_iterations() {
  std::set<std::int64_t> out;
  const char* env = std::getenv("MEGATRON_TEST_NAN_ITERATIONS");
  if (!env) return out;
  std::istringstream in(env);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      out.insert(std::stoll(item));
    } catch (const std::exception&) {
      throw Error("MEGATRON_TEST_NAN_ITERATIONS: '" + item + "' is not an iteration number");
    }
  }
  return out;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

Trainer::Trainer(TrainerServices services, Model& model, Optimizer& optimizer, Dataset& dataset)
    : impl_(std::make_unique<Impl>(std::move(services), model, optimizer, dataset)) {}

Trainer::Trainer(TrainerServices services, Model& model, Optimizer& optimizer, Dataset& dataset,
                 FinetuneSchedule schedule)
    : Trainer(std::move(services), model, optimizer, dataset) {
  impl_->finetune = std::move(schedule);
}

Trainer::~Trainer() = default;

Batch Trainer::Impl::gather(data::Split split, const std::vector<std::int64_t>& indices) const {
  Batch b = Batch::allocate(sample_fields, static_cast<std::int64_t>(indices.size()));
  const std::int64_t size = dataset.size(split);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= size) {
      throw Error("the " + std::string(data::split_name(split)) + " split has " +
                  std::to_string(size) + " samples; sample " + std::to_string(indices[i]) +
                  " was asked for");
    }
    dataset.get(split, indices[i], b.sample(static_cast<std::int64_t>(i)));
  }
  return held_share(std::move(b));
}

Batch Trainer::Impl::micro_batch(data::Split split, std::int64_t position, std::int64_t k,
                                 std::int64_t mbs) const {
  // Megatron's pretraining sampler: each global batch is read in slices of mbs * dp samples, one
  // slice per micro-batch, and data-parallel rank r takes the r-th mbs samples of each slice.
  const std::int64_t dp = services.parallel.dp_size(), dp_rank = services.parallel.dp_rank();
  const std::int64_t first = position + (k * dp + dp_rank) * mbs;
  Batch b = Batch::allocate(sample_fields, mbs);
  const std::int64_t size = dataset.size(split);
  for (std::int64_t i = 0; i < mbs; ++i) {
    std::int64_t index = first + i;
    // Fine-tuning reads its validation samples round and round (Megatron's infinite loader).
    if (finetune && split == data::Split::kValid && size > 0) index %= size;
    if (index >= size) {
      throw Error("the " + std::string(data::split_name(split)) + " split has " +
                  std::to_string(size) + " samples; sample " + std::to_string(index) +
                  " was asked for");
    }
    dataset.get(split, index, b.sample(i));
  }
  return held_share(std::move(b));
}

Batch Trainer::Impl::held_share(Batch b) const {
  const ParallelState& parallel = services.parallel;
  if (parallel.cp_size() == 1) return b;
  const nn::ContextParallelism cp{nullptr, parallel.cp_rank(), parallel.cp_size()};
  return nn::context_parallel_batch(b, cp, dataset.seq_length(), model.input_fields());
}

namespace {

// Each term's value (sum / count) as the log prints it.
std::vector<NamedLoss> loss_values(const StepResult& r) {
  std::vector<NamedLoss> out;
  for (const LossTerm& t : r.losses)
    out.push_back({t.name, t.count > 0 ? t.sum / t.count : 0.0});
  return out;
}

}  // namespace

void Trainer::Impl::setup() {
  const config::CoreConfig& core = services.core;
  Logger& log = services.log;
  ParallelState& parallel = services.parallel;
  // Fine-tuning sets the length itself: epochs x batches per epoch (finetune_utils).
  training = core.training;
  if (finetune) {
    training.train_iters = finetune->epochs * finetune->iterations_per_epoch;
    training.train_samples.reset();
    if (!training.rampup_batch_size.empty()) {
      throw ConfigError(
          "[training] rampup_batch_size: batch-size ramp-up is not supported for "
          "fine-tuning (as in Megatron's finetune_utils)");
    }
  }
  const std::int64_t dp = parallel.dp_size();
  logs_here = parallel.world_rank() == parallel.world_size() - 1;
  // Refused before any work: what context parallelism does not cover yet (the model refuses
  // itself at build when it cannot split its sequences).
  const std::int64_t cp = parallel.cp_size();
  if (cp > 1 && finetune) {
    throw ConfigError("[parallel] context_parallel_size = " + std::to_string(cp) +
                      ": fine-tuning with context parallelism is not supported yet; use 1");
  }
  // The rank's own device, resolved by the parallel state (with CUDA under MPI: its local GPU).
  device = parallel.device();
  if (Device::parse(core.runtime.device).type != device.type) {
    throw Error("[runtime] device = \"" + core.runtime.device +
                "\", but the parallel state was created for " + device.str());
  }
  seed = static_cast<std::uint64_t>(training.seed);
  injected_nan = injected_nan_iterations();

  batches.emplace(BatchSchedule::from_config(training, dp));
  const std::int64_t gbs = batches->global_batch_size();
  const std::int64_t mbs = batches->micro_batch_size();
  if (finetune && batches->at(0).num_micro_batches != 1) {
    throw ConfigError(
        "[training] global_batch_size = " + std::to_string(gbs) +
        ": fine-tuning runs one micro-batch per data-parallel rank and iteration (Megatron's "
        "finetune_utils has no gradient accumulation); set it to micro_batch_size x "
        "data-parallel size = " +
        std::to_string(mbs * dp));
  }
  train_iters = update_train_iters(training, *batches);
  scheduler.emplace(make_optimizer_param_scheduler(training, gbs));
  scaler = make_loss_scaler(training);

  const std::array<std::int64_t, 3> samples = train_valid_test_num_samples(training, gbs);
  sample_fields = dataset.sample_fields();
  if (finetune) {
    log.info(
        "fine-tuning on {} train samples ({} iterations per epoch, {} epochs); {} valid "
        "samples",
        dataset.size(data::Split::kTrain), finetune->iterations_per_epoch, finetune->epochs,
        dataset.size(data::Split::kValid));
  } else {
    log.info("building datasets: {} train, {} valid, {} test samples", samples[0], samples[1],
             samples[2]);
    dataset.build(samples);
  }

  ModelBuildInfo info = model_build_info(
      parallel, core, model, static_cast<std::int64_t>(dataset.tokenizer().vocab_size()),
      dataset.seq_length(), sample_fields);
  pipeline = model_pipeline_layout(core, model);
  if (pipeline.pipeline_size > 1) {
    // Megatron's check, at config time: every micro-batch count the run will see must suit the
    // schedule (the ramp-up's first size included).
    validate_pipeline(pipeline, batches->at(0).num_micro_batches);
    validate_pipeline(pipeline, gbs / (mbs * dp));
  }
  model.build(info);
  ParameterSet& params = model.parameters();
  log.info("{}", model.describe());

  Backend& be = backend_for(device);
  ddp_settings.overlap_grad_reduce = core.ddp.overlap_grad_reduce;
  ddp_settings.use_distributed_optimizer = core.ddp.use_distributed_optimizer;
  ddp_settings.overlap_param_gather = core.ddp.overlap_param_gather;
  ddp_settings.bucket_size = core.ddp.ddp_bucket_size;
  // Under expert parallelism the experts' gradients have a buffer of their own, reduced over
  // the expert-data-parallel group.
  Communicator* expert_data =
      parallel.ep_size() > 1 ? &parallel.device_comm(Group::expert_data) : nullptr;
  // Gradients are averaged over the data-parallel and context-parallel ranks together: the
  // context-parallel ranks hold parts of the same samples (Megatron's data-parallel group "with
  // context parallel"); it is the data-parallel group when context_parallel_size is 1.
  ddp = std::make_unique<GradBuffers>(params, parallel.device_comm(Group::data_context), be,
                                      ddp_settings, expert_data);
  // The optimizer steps whole parameters, or this rank's shards with the distributed optimizer.
  ParameterSet& opt_params = ddp->optimizer_params();
  if (dp * cp > 1 || ddp->distributed()) {
    log.info(
        "data parallel over {} ranks{}: {} gradient bucket(s) of {} elements in all, overlap {}; "
        "distributed optimizer {} ({} elements stepped here)",
        dp,
        cp > 1 ? " x context " + std::to_string(cp) + " (gradients averaged over " +
                     std::to_string(dp * cp) + ")"
               : std::string(),
        ddp->layout().buckets.size(), ddp->layout().numel,
        ddp_settings.overlap_grad_reduce ? "on" : "off", ddp->distributed() ? "on" : "off",
        ddp->distributed() ? ddp->layout().owned_elements(parallel.group_rank(Group::data_context))
                           : params.numel());
  }
  optimizer.attach(opt_params);
  // The MFU's denominator, on the rank that prints the log.
  peak_tflops = core.runtime.peak_tflops;
  if (logs_here && peak_tflops <= 0) {
    peak_tflops = measure_peak_tflops(be, info.compute_dtype);
    log.info(
        "MFU against a peak of {:.3f} TFLOP/s per rank (a {} GEMM measured at start-up; "
        "[runtime] peak_tflops sets it)",
        peak_tflops, dtype_name(info.compute_dtype));
  } else if (logs_here) {
    log.info("MFU against a peak of {:.3f} TFLOP/s per rank ([runtime] peak_tflops)", peak_tflops);
  }
  if (!core.checkpoint.load.empty()) load_checkpoint();
  // finetune_utils: the pretrained checkpoint initialises the model when nothing was resumed.
  if (finetune && iteration == 0 && finetune->initialise) finetune->initialise();

  if (logs_here && !core.logging.metrics_file.empty()) {
    metrics.open(core.logging.metrics_file, std::ios::app);
    if (!metrics) {
      throw Error("cannot open [logging] metrics_file '" + core.logging.metrics_file + "'");
    }
  }
  bar = ProgressBar(logs_here);
}

void Trainer::Impl::report_evaluation(data::Split split, EvalKind kind, std::int64_t& position) {
  if (training.eval_iters <= 0 || dataset.size(split) == 0) return;
  const StepResult result = evaluate(split, position);
  if (!logs_here) return;
  bar.clear();
  const std::vector<NamedLoss> losses = loss_values(result);
  for (const std::string& line : format_validation_box(eval_prefix(iteration, kind), losses))
    std::cout << line << "\n";
  std::cout.flush();
  if (metrics) metrics << validation_metrics_json(iteration, kind, losses) << std::endl;
}

void Trainer::Impl::save_now(TrainSummary& summary) {
  bar.clear();
  saves.last_attempt = iteration;
  try {
    summary.last_checkpoint = save_checkpoint();
    saves.last_saved = iteration;
    saves.unsaved.reset();
  } catch (const Error& e) {
    // Every rank learns a save's outcome, so all take the same branch here. The failed save
    // removed its partial file; the previous checkpoint and the marker were never touched.
    const std::string what = "checkpoint of iteration " + std::to_string(iteration) +
                             " not saved: " + e.what() +
                             "; the previous checkpoint and latest_checkpointed_iteration.txt "
                             "are untouched";
    if (services.core.checkpoint.exit_on_save_failure) {
      throw CheckpointSaveError(what + " ([checkpoint] exit_on_save_failure = true)");
    }
    services.log.error("{}; training goes on ([checkpoint] exit_on_save_failure = true would stop)",
                       what);
    saves.unsaved = what;
  }
}

void Trainer::Impl::log_step(const StepOutcome& step, TrainSummary& summary) {
  if (step.skipped) {
    ++interval.skipped;
    if (!std::isfinite(step.loss) || step.nan_skip) ++interval.nan;
    interval.last_grad_norm.reset();
    bar.clear();
    if (step.nan_skip) {
      ++consecutive_nan;
      services.log.warn(
          "iteration {}: NaN or Inf (loss {}, grad norm {}), step skipped ({} in a row; "
          "the run stops at max_skipped_nan_steps = {})",
          iteration, step.loss, step.grad_norm, consecutive_nan, training.max_skipped_nan_steps);
    } else {
      services.log.warn("iteration {}: gradient overflow, step skipped; loss scale now {}",
                        iteration,
                        static_cast<double>(scaler->scale()));  // exact: 2^32, not 4294967300
    }
  } else {
    interval.last_grad_norm = step.grad_norm;
  }
  if (!step.nan_skip) consecutive_nan = 0;
  ++interval.iterations;
  for (const NamedLoss& l : loss_values(step.sums)) {
    auto it = std::find_if(interval.losses.begin(), interval.losses.end(),
                           [&](const NamedLoss& x) { return x.name == l.name; });
    if (it == interval.losses.end()) {
      interval.losses.push_back(l);
    } else {
      it->value += l.value;
    }
  }
  summary.losses.push_back(step.loss);

  if (iteration % services.core.logging.log_interval == 0 || iteration == train_iters) {
    const auto n = static_cast<double>(interval.iterations);
    const double elapsed = seconds_since(interval.start);
    TrainingLogFigures f;
    f.iteration = iteration;
    f.train_iters = train_iters;
    f.consumed_samples = consumed_train;
    f.elapsed_ms_per_iteration = elapsed * 1000.0 / n;
    f.tflops_per_gpu = model.flops_per_iteration(step.sizes.running_global_batch_size) /
                       (elapsed / n * 1e12 * static_cast<double>(services.parallel.world_size()));
    if (peak_tflops > 0) f.mfu = model_flops_utilization(*f.tflops_per_gpu, peak_tflops);
    f.learning_rate = scheduler->current_lr();
    f.global_batch_size = step.sizes.running_global_batch_size;
    for (const NamedLoss& l : interval.losses)
      f.losses.push_back({l.name, l.value / n});
    f.loss_scale = scaler ? scaler->scale() : 1.0;
    f.grad_norm = interval.last_grad_norm;
    f.skipped_iterations = interval.skipped;
    f.nan_iterations = interval.nan;
    if (logs_here) {
      bar.clear();
      std::cout << format_training_log(f, log_timestamp(std::chrono::system_clock::now()))
                << std::endl;
      if (metrics) metrics << training_metrics_json(f) << std::endl;
    }
    interval = Interval{};
  }
  bar.update(iteration, train_iters);
}

bool Trainer::Impl::between_steps(TrainSummary& summary) {
  const config::CheckpointConfig& checkpoint = services.core.checkpoint;
  if (training.eval_interval > 0 && iteration % training.eval_interval == 0 &&
      iteration < train_iters) {
    report_evaluation(data::Split::kValid, EvalKind::periodic, consumed_valid);
  }
  const bool nan_stop = consecutive_nan > 0 && consecutive_nan >= training.max_skipped_nan_steps;
  const bool stop = nan_stop || stop_requested() ||
                    (training.exit_interval && iteration % *training.exit_interval == 0);
  const bool periodic = checkpoint.save_interval && iteration % *checkpoint.save_interval == 0;
  if (!checkpoint.save.empty() && (periodic || stop)) save_now(summary);
  if (nan_stop) {
    bar.clear();
    throw NumericalError(
        "iteration " + std::to_string(iteration) + ": NaN or Inf in the loss or gradient norm " +
        "for " + std::to_string(consecutive_nan) + " consecutive iteration(s) " +
        "([training] max_skipped_nan_steps = " + std::to_string(training.max_skipped_nan_steps) +
        "); the weights are those of iteration " + std::to_string(iteration - consecutive_nan) +
        (saves.last_saved == iteration ? ", saved as iteration " + std::to_string(iteration)
         : checkpoint.save.empty()     ? std::string(", not saved (no [checkpoint] save)")
                                       : std::string(", not saved (the save failed, above)")) +
        ". Lower the learning rate, check the data, or enable clip_grad.");
  }
  // Fine-tuning: a checkpoint and the task's callback (accuracies) at every epoch's end.
  if (finetune && iteration % finetune->iterations_per_epoch == 0) {
    if (!checkpoint.save.empty() && saves.last_saved != iteration) save_now(summary);
    if (finetune->end_of_epoch) {
      bar.clear();
      finetune->end_of_epoch(iteration / finetune->iterations_per_epoch - 1);
    }
  }
  if (stop) {
    services.log.info("stopping at iteration {} ({})", iteration,
                      stop_requested() ? "signal received" : "exit_interval");
    summary.interrupted = true;
  }
  return stop;
}

// Megatron's train: setup, then steps with their logging, evaluation, saves and stop decisions,
// then the final save and evaluations.
TrainSummary Trainer::run() {
  Impl& t = *impl_;
  t.setup();
  TrainSummary summary;
  install_stop_signal_handlers();
  t.services.log.info(
      "training for {} iterations from iteration {} (global batch {}, micro batch {})",
      t.train_iters, t.iteration, t.batches->global_batch_size(), t.batches->micro_batch_size());
  t.interval = Impl::Interval{};
  while (t.iteration < t.train_iters) {
    const Impl::StepOutcome step = t.train_step();
    t.log_step(step, summary);
    if (t.between_steps(summary)) break;
  }

  t.bar.clear();
  if (!summary.interrupted && !t.finetune) {
    if (!t.services.core.checkpoint.save.empty() && t.saves.last_attempt != t.iteration) {
      t.save_now(summary);
    }
    std::int64_t valid_position = t.consumed_valid, test_position = 0;
    t.report_evaluation(data::Split::kValid, EvalKind::final_validation, valid_position);
    t.report_evaluation(data::Split::kTest, EvalKind::final_test, test_position);
  }
  if (t.saves.unsaved) {
    throw CheckpointSaveError(*t.saves.unsaved + "; the run ended without saving its last state");
  }
  summary.iteration = t.iteration;
  summary.consumed_samples = t.consumed_train;
  return summary;
}

}  // namespace megatron::train
