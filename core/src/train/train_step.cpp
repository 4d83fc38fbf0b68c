// One training step and one evaluation pass (Megatron's train_step and evaluate): the
// micro-batches (pipelined or not), the gradient and loss reductions, loss-scale, NaN/Inf check,
// clipping and the optimizer step.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "grad_norm.h"
#include "pipeline_executor.h"
#include "trainer_impl.h"

namespace megatron::train {

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

}  // namespace

StepResult Trainer::Impl::accumulate_gradients(const BatchSizes& sizes, float loss_scale) {
  ParallelState& parallel = services.parallel;
  const std::int64_t m = sizes.num_micro_batches, mbs = batches->micro_batch_size();
  const std::int64_t dp = parallel.dp_size(), dp_rank = parallel.dp_rank();
  GradBuffers& grads = *ddp;
  // The previous step's all-gather, if still in flight, is waited for bucket by bucket by the
  // forward below (params_needed), as Megatron's forward pre-hooks do.
  grads.zero_grads();
  auto options = [&](std::int64_t k) {
    StepOptions o;
    o.loss_scale = loss_scale / static_cast<float>(m);
    o.dropout_seed = seed;
    o.dropout_offset = static_cast<std::uint64_t>((iteration * m + k) * dp + dp_rank + 1);
    // Gradients are final only after the last micro-batch: reduce its buckets as they fill.
    // (Each pipeline chunk runs its micro-batches' backwards in order, so this holds there too.)
    if (ddp_settings.overlap_grad_reduce && k == m - 1) {
      o.grads_ready = [&grads](const std::vector<Parameter*>& done) { grads.grads_ready(done); };
    }
    if (grads.gathers_in_flight() > 0) {
      o.params_needed = [&grads](const std::vector<Parameter*>& p) { grads.wait_param_gather(p); };
    }
    return o;
  };
  // Fine-tuning: this rank's samples of the epoch's shuffle (maybe a partial last batch).
  const std::vector<std::int64_t> finetune_samples =
      finetune ? finetune->train_samples(iteration) : std::vector<std::int64_t>{};
  auto batch = [&](std::int64_t k) {
    if (finetune) return gather(data::Split::kTrain, finetune_samples);
    return micro_batch(data::Split::kTrain, consumed_train, k, mbs);
  };
  const std::int64_t step_mbs = finetune ? static_cast<std::int64_t>(finetune_samples.size()) : mbs;
  StepResult sums;
  if (pipeline.pipeline_size > 1) {
    sums = run_pipeline_step(
        model, {pipeline, parallel.pp_rank(), parallel.device_comm(Group::pipeline), m, step_mbs,
                device, true, batch, options});
    reduce_auxiliary_losses(model.auxiliary_loss_names(), parallel.comm(Group::pipeline), sums);
  } else {
    for (std::int64_t k = 0; k < m; ++k)
      sums.add(model.step(batch(k), options(k)));
  }
  // The model's per-iteration buffer updates (MoE's expert bias), whether or not the optimizer
  // then steps, as Megatron's finalize_model_grads.
  model.end_training_iteration();
  // Data-parallel mean of the gradients (bucket by bucket) and sum of the loss figures.
  grads.finish_grad_sync();
  if (dp * parallel.cp_size() > 1) all_reduce_losses(parallel.comm(Group::data_context), sums);
  // Over the optimizer's parameters: with the distributed optimizer only this rank's shards
  // hold reduced gradients. Tensor-parallel peers shard alike (same buffer layout), and each
  // stage's copy of a tied embedding has a bucket of its own, so the pipeline peers do too.
  ParameterSet& opt_params = grads.optimizer_params();
  allreduce_sequence_parallel_grads(opt_params, parallel);
  allreduce_shared_pipeline_grads(opt_params, parallel);
  return sums;
}

void Trainer::Impl::apply_gradients(StepOutcome& step, float loss_scale) {
  Backend& be = backend_for(device);
  GradBuffers& grads = *ddp;
  ParameterSet& opt_params = grads.optimizer_params();
  if (loss_scale != 1.0f) {
    for (auto& p : opt_params)
      be.scale(p->grad, 1.0 / static_cast<double>(loss_scale));
  }
  if (injected_nan.count(iteration + 1) && opt_params.size() > 0) {
    be.fill(opt_params[0].grad, std::numeric_limits<double>::quiet_NaN());
  }
  step.grad_norm = global_grad_norm(be, opt_params, services.parallel, grads.distributed());
  const bool found_inf = !std::isfinite(step.grad_norm);
  if (scaler) {
    scaler->update(found_inf);
    step.skipped = found_inf;
  } else if (found_inf || !std::isfinite(step.loss)) {
    // Megatron's check_for_nan_in_loss_and_grad, with a skip instead of an error: the weights
    // and the optimizer state keep the last good step. Every rank sees the same global loss
    // and norm, so all skip together.
    step.skipped = step.nan_skip = true;
  }
  if (step.skipped) {
    ++skipped_iterations;
    return;
  }
  if (training.clip_grad > 0) {
    const double coef = training.clip_grad / (step.grad_norm + 1e-6);
    if (coef < 1.0) {
      for (auto& p : opt_params)
        be.scale(p->grad, coef);
    }
  }
  ++optimizer_steps;
  grads.wait_param_gather();  // whatever forward did not need: the step writes the buffer
  optimizer.step(opt_params,
                 {scheduler->current_lr(), scheduler->current_weight_decay(), optimizer_steps});
  grads.start_param_gather();  // distributed optimizer: every rank's updated shard to all
  scheduler->step(step.sizes.running_global_batch_size);
}

Trainer::Impl::StepOutcome Trainer::Impl::train_step() {
  StepOutcome step;
  step.sizes = batches->at(consumed_train);
  const float loss_scale = scaler ? scaler->scale() : 1.0f;
  step.sums = accumulate_gradients(step.sizes, loss_scale);
  step.loss = step.sums.objective();
  apply_gradients(step, loss_scale);
  consumed_train += step.sizes.running_global_batch_size;
  ++iteration;
  return step;
}

StepResult Trainer::Impl::evaluate(data::Split split, std::int64_t& position) {
  ParallelState& parallel = services.parallel;
  ddp->wait_param_gather();
  const std::int64_t gbs = batches->global_batch_size(), mbs = batches->micro_batch_size();
  const std::int64_t m = gbs / (mbs * parallel.dp_size());
  StepResult sums;
  for (std::int64_t it = 0; it < training.eval_iters; ++it) {
    auto options = [](std::int64_t) {
      StepOptions o;
      o.backward = false;
      o.training = false;
      return o;
    };
    auto batch = [&, start = position](std::int64_t k) {
      return micro_batch(split, start, k, mbs);
    };
    if (pipeline.pipeline_size > 1) {
      sums.add(run_pipeline_step(
          model, {pipeline, parallel.pp_rank(), parallel.device_comm(Group::pipeline), m, mbs,
                  device, false, batch, options}));
    } else {
      for (std::int64_t k = 0; k < m; ++k)
        sums.add(model.step(batch(k), options(k)));
    }
    position += gbs;
  }
  all_reduce_losses(parallel.comm(Group::data_context), sums);
  return sums;
}

}  // namespace megatron::train
