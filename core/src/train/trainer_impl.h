// Trainer internals shared by the loop and its checkpoint code.
#pragma once

#include <filesystem>
#include <optional>

#include "grad_buffer.h"
#include "megatron/backend/backend.h"
#include "megatron/train/batch_schedule.h"
#include "megatron/train/loss_scaler.h"
#include "megatron/train/lr_schedule.h"
#include "megatron/train/trainer.h"

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

  // Progress, all saved in checkpoints.
  std::int64_t iteration = 0;
  std::int64_t consumed_train = 0;
  std::int64_t consumed_valid = 0;
  std::int64_t skipped_iterations = 0;
  std::int64_t optimizer_steps = 0;  // applied updates (Adam's bias-correction step)
  std::uint64_t seed = 1234;         // dropout seed

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
