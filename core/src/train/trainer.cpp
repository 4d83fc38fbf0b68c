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

// Sums and counts of every term, reduced over a communicator's ranks (which all hold the same
// terms in the same order: the same model on the same pipeline stage).
void all_reduce_losses(Communicator& comm, StepResult& r) {
  if (comm.size() == 1 || r.losses.empty()) return;
  std::vector<double> v;
  for (const LossTerm& t : r.losses) {
    v.push_back(t.sum);
    v.push_back(t.count);
  }
  comm.all_reduce(std::span<double>(v), ReduceOp::sum);
  for (std::size_t i = 0; i < r.losses.size(); ++i) {
    r.losses[i].sum = v[2 * i];
    r.losses[i].count = v[2 * i + 1];
  }
}

// The model's auxiliary losses summed over the pipeline stages: each stage reported its own
// layers' (none, on a stage without MoE layers), and the last stage logs them.
void reduce_auxiliary_losses(const std::vector<std::string>& names, Communicator& pipeline,
                             StepResult& r) {
  if (names.empty() || pipeline.size() == 1) return;
  std::vector<double> v;
  for (const std::string& name : names) {
    const LossTerm* t = r.find(name);
    v.push_back(t ? t->sum : 0.0);
    v.push_back(t ? t->count : 0.0);
  }
  pipeline.all_reduce(std::span<double>(v), ReduceOp::sum);
  StepResult summed;
  for (std::size_t i = 0; i < names.size(); ++i)
    summed.losses.push_back({names[i], v[2 * i], v[2 * i + 1], false});
  std::erase_if(r.losses, [&](const LossTerm& t) {
    return std::find(names.begin(), names.end(), t.name) != names.end();
  });
  r.add(summed);
}

// Each term's value (sum / count) as the log prints it.
std::vector<NamedLoss> loss_values(const StepResult& r) {
  std::vector<NamedLoss> out;
  for (const LossTerm& t : r.losses)
    out.push_back({t.name, t.count > 0 ? t.sum / t.count : 0.0});
  return out;
}

}  // namespace

TrainSummary Trainer::run() {
  Impl& t = *impl_;
  const config::CoreConfig& core = t.services.core;
  // Fine-tuning sets the length itself: epochs x batches per epoch (finetune_utils).
  config::TrainingConfig training = core.training;
  if (t.finetune) {
    training.train_iters = t.finetune->epochs * t.finetune->iterations_per_epoch;
    training.train_samples.reset();
    if (!training.rampup_batch_size.empty()) {
      throw ConfigError(
          "[training] rampup_batch_size: batch-size ramp-up is not supported for "
          "fine-tuning (as in Megatron's finetune_utils)");
    }
  }
  const config::TrainingConfig& tc = training;
  Logger& log = t.services.log;
  ParallelState& parallel = t.services.parallel;
  const std::int64_t dp = parallel.dp_size(), dp_rank = parallel.dp_rank();
  const bool last_rank = parallel.world_rank() == parallel.world_size() - 1;
  // Refused before any work: what context parallelism does not cover yet (the model refuses
  // itself at build when it cannot split its sequences).
  const std::int64_t cp = parallel.cp_size();
  if (cp > 1 && t.finetune) {
    throw ConfigError("[parallel] context_parallel_size = " + std::to_string(cp) +
                      ": fine-tuning with context parallelism is not supported yet; use 1");
  }
  // The rank's own device, resolved by the parallel state (with CUDA under MPI: its local GPU).
  t.device = parallel.device();
  if (Device::parse(core.runtime.device).type != t.device.type) {
    throw Error("[runtime] device = \"" + core.runtime.device +
                "\", but the parallel state was created for " + t.device.str());
  }
  t.seed = static_cast<std::uint64_t>(tc.seed);

  t.batches.emplace(BatchSchedule::from_config(tc, dp));
  const std::int64_t gbs = t.batches->global_batch_size();
  const std::int64_t mbs = t.batches->micro_batch_size();
  if (t.finetune && t.batches->at(0).num_micro_batches != 1) {
    throw ConfigError(
        "[training] global_batch_size = " + std::to_string(gbs) +
        ": fine-tuning runs one micro-batch per data-parallel rank and iteration (Megatron's "
        "finetune_utils has no gradient accumulation); set it to micro_batch_size x "
        "data-parallel size = " +
        std::to_string(mbs * dp));
  }
  t.train_iters = update_train_iters(tc, *t.batches);
  t.scheduler.emplace(make_optimizer_param_scheduler(tc, gbs));
  t.scaler = make_loss_scaler(tc);

  const std::array<std::int64_t, 3> samples = train_valid_test_num_samples(tc, gbs);
  t.sample_fields = t.dataset.sample_fields();
  if (t.finetune) {
    log.info(
        "fine-tuning on {} train samples ({} iterations per epoch, {} epochs); {} valid "
        "samples",
        t.dataset.size(data::Split::kTrain), t.finetune->iterations_per_epoch, t.finetune->epochs,
        t.dataset.size(data::Split::kValid));
  } else {
    log.info("building datasets: {} train, {} valid, {} test samples", samples[0], samples[1],
             samples[2]);
    t.dataset.build(samples);
  }

  ModelBuildInfo info = model_build_info(
      parallel, core, t.model, static_cast<std::int64_t>(t.dataset.tokenizer().vocab_size()),
      t.dataset.seq_length(), t.sample_fields);
  const PipelineLayout pipeline = model_pipeline_layout(core, t.model);
  const int pp = pipeline.pipeline_size, pp_rank = parallel.pp_rank();
  if (pp > 1) {
    // Megatron's check, at config time: every micro-batch count the run will see must suit the
    // schedule (the ramp-up's first size included).
    validate_pipeline(pipeline, t.batches->at(0).num_micro_batches);
    validate_pipeline(pipeline, gbs / (mbs * dp));
  }
  t.model.build(info);
  ParameterSet& params = t.model.parameters();
  log.info("{}", t.model.describe());

  Backend& be = backend_for(t.device);
  DdpSettings ddp_settings;
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
  t.ddp = std::make_unique<GradBuffers>(params, parallel.device_comm(Group::data_context), be,
                                        ddp_settings, expert_data);
  GradBuffers& ddp = *t.ddp;
  // The optimizer steps whole parameters, or this rank's shards with the distributed optimizer.
  ParameterSet& opt_params = ddp.optimizer_params();
  if (dp * cp > 1 || ddp.distributed()) {
    log.info(
        "data parallel over {} ranks{}: {} gradient bucket(s) of {} elements in all, overlap {}; "
        "distributed optimizer {} ({} elements stepped here)",
        dp,
        cp > 1 ? " x context " + std::to_string(cp) + " (gradients averaged over " +
                     std::to_string(dp * cp) + ")"
               : std::string(),
        ddp.layout().buckets.size(), ddp.layout().numel,
        ddp_settings.overlap_grad_reduce ? "on" : "off", ddp.distributed() ? "on" : "off",
        ddp.distributed() ? ddp.layout().owned_elements(parallel.group_rank(Group::data_context))
                          : params.numel());
  }
  t.optimizer.attach(opt_params);
  // The MFU's denominator, on the rank that prints the log.
  double peak_tflops = core.runtime.peak_tflops;
  if (last_rank && peak_tflops <= 0) {
    peak_tflops = measure_peak_tflops(be, info.compute_dtype);
    log.info(
        "MFU against a peak of {:.3f} TFLOP/s per rank (a {} GEMM measured at start-up; "
        "[runtime] peak_tflops sets it)",
        peak_tflops, dtype_name(info.compute_dtype));
  } else if (last_rank) {
    log.info("MFU against a peak of {:.3f} TFLOP/s per rank ([runtime] peak_tflops)", peak_tflops);
  }
  if (!core.checkpoint.load.empty()) t.load_checkpoint();
  // finetune_utils: the pretrained checkpoint initialises the model when nothing was resumed.
  if (t.finetune && t.iteration == 0 && t.finetune->initialise) t.finetune->initialise();

  std::ofstream metrics;
  if (last_rank && !core.logging.metrics_file.empty()) {
    metrics.open(core.logging.metrics_file, std::ios::app);
    if (!metrics) {
      throw Error("cannot open [logging] metrics_file '" + core.logging.metrics_file + "'");
    }
  }

  ProgressBar bar(last_rank);
  // One evaluation pass of eval_iters global batches over `split`, from `first`.
  auto evaluate = [&](data::Split split, std::int64_t& position) {
    ddp.wait_param_gather();
    StepResult sums;
    const std::int64_t m = gbs / (mbs * dp);
    for (std::int64_t it = 0; it < tc.eval_iters; ++it) {
      auto options = [](std::int64_t) {
        StepOptions o;
        o.backward = false;
        o.training = false;
        return o;
      };
      auto batch = [&, start = position](std::int64_t k) {
        return t.micro_batch(split, start, k, mbs);
      };
      if (pp > 1) {
        sums.add(
            run_pipeline_step(t.model, {pipeline, pp_rank, parallel.device_comm(Group::pipeline), m,
                                        mbs, t.device, false, batch, options}));
      } else {
        for (std::int64_t k = 0; k < m; ++k)
          sums.add(t.model.step(batch(k), options(k)));
      }
      position += gbs;
    }
    all_reduce_losses(parallel.comm(Group::data_context), sums);
    return sums;
  };
  auto report_eval = [&](data::Split split, EvalKind kind, std::int64_t& position) {
    if (tc.eval_iters <= 0 || t.dataset.size(split) == 0) return;
    const StepResult result = evaluate(split, position);
    if (!last_rank) return;
    bar.clear();
    const std::vector<NamedLoss> losses = loss_values(result);
    for (const std::string& line : format_validation_box(eval_prefix(t.iteration, kind), losses))
      std::cout << line << "\n";
    std::cout.flush();
    if (metrics) metrics << validation_metrics_json(t.iteration, kind, losses) << std::endl;
  };

  TrainSummary summary;
  install_stop_signal_handlers();
  log.info("training for {} iterations from iteration {} (global batch {}, micro batch {})",
           t.train_iters, t.iteration, gbs, mbs);
  // Per loss term, the sum over the interval's iterations of each iteration's value.
  std::vector<NamedLoss> interval_losses;
  std::int64_t interval_iters = 0, interval_nan = 0, interval_skipped = 0;
  std::optional<double> last_grad_norm;
  auto interval_start = Clock::now();
  std::int64_t last_saved = -1;
  // NaN/Inf steps skipped in a row (fp16 overflow skips, which the loss scaler handles, excluded).
  std::int64_t consecutive_nan = 0;
  const std::set<std::int64_t> injected_nan = injected_nan_iterations();
  // Why the latest save failed, while no later save has succeeded.
  std::optional<std::string> unsaved;
  std::int64_t last_save_attempt = -1;
  auto save_now = [&] {
    bar.clear();
    last_save_attempt = t.iteration;
    try {
      summary.last_checkpoint = t.save_checkpoint();
      last_saved = t.iteration;
      unsaved.reset();
    } catch (const Error& e) {
      // Every rank learns a save's outcome, so all take the same branch here. The failed save
      // removed its partial file; the previous checkpoint and the marker were never touched.
      const std::string what = "checkpoint of iteration " + std::to_string(t.iteration) +
                               " not saved: " + e.what() +
                               "; the previous checkpoint and latest_checkpointed_iteration.txt "
                               "are untouched";
      if (core.checkpoint.exit_on_save_failure) {
        throw CheckpointSaveError(what + " ([checkpoint] exit_on_save_failure = true)");
      }
      log.error("{}; training goes on ([checkpoint] exit_on_save_failure = true would stop)", what);
      unsaved = what;
    }
  };

  while (t.iteration < t.train_iters) {
    const BatchSizes sizes = t.batches->at(t.consumed_train);
    const std::int64_t m = sizes.num_micro_batches;
    const float scale = t.scaler ? t.scaler->scale() : 1.0f;
    // The previous step's all-gather, if still in flight, is waited for bucket by bucket by the
    // forward below (params_needed), as Megatron's forward pre-hooks do.
    ddp.zero_grads();
    StepResult sums;
    auto options = [&](std::int64_t k) {
      StepOptions o;
      o.loss_scale = scale / static_cast<float>(m);
      o.dropout_seed = t.seed;
      o.dropout_offset = static_cast<std::uint64_t>((t.iteration * m + k) * dp + dp_rank + 1);
      // Gradients are final only after the last micro-batch: reduce its buckets as they fill.
      // (Each pipeline chunk runs its micro-batches' backwards in order, so this holds there too.)
      if (ddp_settings.overlap_grad_reduce && k == m - 1) {
        o.grads_ready = [&ddp](const std::vector<Parameter*>& done) { ddp.grads_ready(done); };
      }
      if (ddp.gathers_in_flight() > 0) {
        o.params_needed = [&ddp](const std::vector<Parameter*>& p) { ddp.wait_param_gather(p); };
      }
      return o;
    };
    // Fine-tuning: this rank's samples of the epoch's shuffle (maybe a partial last batch).
    const std::vector<std::int64_t> finetune_samples =
        t.finetune ? t.finetune->train_samples(t.iteration) : std::vector<std::int64_t>{};
    auto batch = [&](std::int64_t k) {
      if (t.finetune) return t.gather(data::Split::kTrain, finetune_samples);
      return t.micro_batch(data::Split::kTrain, t.consumed_train, k, mbs);
    };
    const std::int64_t step_mbs =
        t.finetune ? static_cast<std::int64_t>(finetune_samples.size()) : mbs;
    if (pp > 1) {
      sums = run_pipeline_step(t.model, {pipeline, pp_rank, parallel.device_comm(Group::pipeline),
                                         m, step_mbs, t.device, true, batch, options});
      reduce_auxiliary_losses(t.model.auxiliary_loss_names(), parallel.comm(Group::pipeline), sums);
    } else {
      for (std::int64_t k = 0; k < m; ++k)
        sums.add(t.model.step(batch(k), options(k)));
    }
    // The model's per-iteration buffer updates (MoE's expert bias), whether or not the optimizer
    // then steps, as Megatron's finalize_model_grads.
    t.model.end_training_iteration();
    // Data-parallel mean of the gradients (bucket by bucket) and sum of the loss figures.
    ddp.finish_grad_sync();
    if (dp * cp > 1) all_reduce_losses(parallel.comm(Group::data_context), sums);
    // Over the optimizer's parameters: with the distributed optimizer only this rank's shards
    // hold reduced gradients. Tensor-parallel peers shard alike (same buffer layout), and each
    // stage's copy of a tied embedding has a bucket of its own, so the pipeline peers do too.
    allreduce_sequence_parallel_grads(opt_params, parallel);
    allreduce_shared_pipeline_grads(opt_params, parallel);
    const double loss = sums.objective();

    if (scale != 1.0f) {
      for (auto& p : opt_params)
        be.scale(p->grad, 1.0 / static_cast<double>(scale));
    }
    if (injected_nan.count(t.iteration + 1) && opt_params.size() > 0) {
      be.fill(opt_params[0].grad, std::numeric_limits<double>::quiet_NaN());
    }
    double grad_norm = global_grad_norm(be, opt_params, parallel, ddp.distributed());
    const bool found_inf = !std::isfinite(grad_norm);
    bool skipped = false, nan_skip = false;
    if (t.scaler) {
      t.scaler->update(found_inf);
      skipped = found_inf;
    } else if (found_inf || !std::isfinite(loss)) {
      // Megatron's check_for_nan_in_loss_and_grad, with a skip instead of an error: the weights
      // and the optimizer state keep the last good step. Every rank sees the same global loss
      // and norm, so all skip together.
      skipped = nan_skip = true;
    }
    if (!skipped) {
      if (tc.clip_grad > 0) {
        const double coef = tc.clip_grad / (grad_norm + 1e-6);
        if (coef < 1.0) {
          for (auto& p : opt_params)
            be.scale(p->grad, coef);
        }
      }
      ++t.optimizer_steps;
      ddp.wait_param_gather();  // whatever forward did not need: the step writes the buffer
      t.optimizer.step(opt_params, {t.scheduler->current_lr(), t.scheduler->current_weight_decay(),
                                    t.optimizer_steps});
      ddp.start_param_gather();  // distributed optimizer: every rank's updated shard to all
      t.scheduler->step(sizes.running_global_batch_size);
      last_grad_norm = grad_norm;
    } else {
      ++t.skipped_iterations;
      ++interval_skipped;
      if (!std::isfinite(loss) || nan_skip) ++interval_nan;
      last_grad_norm.reset();
      bar.clear();
      if (nan_skip) {
        ++consecutive_nan;
        log.warn(
            "iteration {}: NaN or Inf (loss {}, grad norm {}), step skipped ({} in a row; "
            "the run stops at max_skipped_nan_steps = {})",
            t.iteration + 1, loss, grad_norm, consecutive_nan, tc.max_skipped_nan_steps);
      } else {
        log.warn("iteration {}: gradient overflow, step skipped; loss scale now {}",
                 t.iteration + 1,
                 static_cast<double>(t.scaler->scale()));  // exact: 2^32, not 4294967300
      }
    }
    if (!nan_skip) consecutive_nan = 0;
    t.consumed_train += sizes.running_global_batch_size;
    ++t.iteration;
    ++interval_iters;
    for (const NamedLoss& l : loss_values(sums)) {
      auto it = std::find_if(interval_losses.begin(), interval_losses.end(),
                             [&](const NamedLoss& x) { return x.name == l.name; });
      if (it == interval_losses.end()) {
        interval_losses.push_back(l);
      } else {
        it->value += l.value;
      }
    }
    summary.losses.push_back(loss);

    if (t.iteration % core.logging.log_interval == 0 || t.iteration == t.train_iters) {
      const double elapsed = seconds_since(interval_start);
      TrainingLogFigures f;
      f.iteration = t.iteration;
      f.train_iters = t.train_iters;
      f.consumed_samples = t.consumed_train;
      f.elapsed_ms_per_iteration = elapsed * 1000.0 / static_cast<double>(interval_iters);
      f.tflops_per_gpu = t.model.flops_per_iteration(sizes.running_global_batch_size) /
                         (elapsed / static_cast<double>(interval_iters) * 1e12 *
                          static_cast<double>(parallel.world_size()));
      if (peak_tflops > 0) f.mfu = model_flops_utilization(*f.tflops_per_gpu, peak_tflops);
      f.learning_rate = t.scheduler->current_lr();
      f.global_batch_size = sizes.running_global_batch_size;
      for (const NamedLoss& l : interval_losses)
        f.losses.push_back({l.name, l.value / static_cast<double>(interval_iters)});
      f.loss_scale = t.scaler ? t.scaler->scale() : 1.0;
      f.grad_norm = last_grad_norm;
      f.skipped_iterations = interval_skipped;
      f.nan_iterations = interval_nan;
      if (last_rank) {
        bar.clear();
        std::cout << format_training_log(f, log_timestamp(std::chrono::system_clock::now()))
                  << std::endl;
        if (metrics) metrics << training_metrics_json(f) << std::endl;
      }
      interval_losses.clear();
      interval_iters = interval_nan = interval_skipped = 0;
      interval_start = Clock::now();
    }
    bar.update(t.iteration, t.train_iters);
    if (tc.eval_interval > 0 && t.iteration % tc.eval_interval == 0 &&
        t.iteration < t.train_iters) {
      report_eval(data::Split::kValid, EvalKind::periodic, t.consumed_valid);
    }
    const bool nan_stop = consecutive_nan > 0 && consecutive_nan >= tc.max_skipped_nan_steps;
    const bool stop =
        nan_stop || stop_requested() || (tc.exit_interval && t.iteration % *tc.exit_interval == 0);
    const bool periodic =
        core.checkpoint.save_interval && t.iteration % *core.checkpoint.save_interval == 0;
    if (!core.checkpoint.save.empty() && (periodic || stop)) save_now();
    if (nan_stop) {
      bar.clear();
      throw NumericalError(
          "iteration " + std::to_string(t.iteration) +
          ": NaN or Inf in the loss or gradient norm " + "for " + std::to_string(consecutive_nan) +
          " consecutive iteration(s) " +
          "([training] max_skipped_nan_steps = " + std::to_string(tc.max_skipped_nan_steps) +
          "); the weights are those of iteration " + std::to_string(t.iteration - consecutive_nan) +
          (last_saved == t.iteration      ? ", saved as iteration " + std::to_string(t.iteration)
           : core.checkpoint.save.empty() ? std::string(", not saved (no [checkpoint] save)")
                                          : std::string(", not saved (the save failed, above)")) +
          ". Lower the learning rate, check the data, or enable clip_grad.");
    }
    // Fine-tuning: a checkpoint and the task's callback (accuracies) at every epoch's end.
    if (t.finetune && t.iteration % t.finetune->iterations_per_epoch == 0) {
      if (!core.checkpoint.save.empty() && last_saved != t.iteration) save_now();
      if (t.finetune->end_of_epoch) {
        bar.clear();
        t.finetune->end_of_epoch(t.iteration / t.finetune->iterations_per_epoch - 1);
      }
    }
    if (stop) {
      log.info("stopping at iteration {} ({})", t.iteration,
               stop_requested() ? "signal received" : "exit_interval");
      summary.interrupted = true;
      break;
    }
  }

  bar.clear();
  if (!summary.interrupted && !t.finetune) {
    if (!core.checkpoint.save.empty() && last_save_attempt != t.iteration) save_now();
    std::int64_t valid_position = t.consumed_valid, test_position = 0;
    report_eval(data::Split::kValid, EvalKind::final_validation, valid_position);
    report_eval(data::Split::kTest, EvalKind::final_test, test_position);
  }
  if (unsaved) {
    throw CheckpointSaveError(*unsaved + "; the run ended without saving its last state");
  }
  summary.iteration = t.iteration;
  summary.consumed_samples = t.consumed_train;
  return summary;
}

}  // namespace megatron::train
