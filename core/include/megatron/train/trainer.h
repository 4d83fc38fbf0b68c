// The training loop: micro-batches with gradient accumulation, data-parallel gradient reduction,
// loss scaling, clipping, the optimizer step, LR schedule, evaluation, logging in Megatron's
// format, periodic and signal-triggered checkpoints, and exact resume.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "megatron/config/core_config.h"
#include "megatron/dataset.h"
#include "megatron/log.h"
#include "megatron/model.h"
#include "megatron/optimizer.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::train {

struct TrainerServices {
  Logger& log;
  ParallelState& parallel;
  const config::CoreConfig& core;
  std::string config_toml;  // the resolved config, stored in checkpoints
};

// What a run did, for the command's exit message and for tests.
struct TrainSummary {
  std::int64_t iteration = 0;         // last completed iteration
  std::int64_t consumed_samples = 0;  // training samples consumed
  std::vector<double> losses;         // lm loss of every iteration run in this process
  bool interrupted = false;           // stopped by SIGTERM/SIGINT or exit_interval
  std::string last_checkpoint;        // file written last, if any
};

// How a fine-tuning task drives the loop instead of the pretraining sampler and train_iters
// (Megatron's tasks/finetune_utils): one micro-batch per data-parallel rank per iteration,
// epochs of the train split, a checkpoint and a callback at the end of each epoch, and the
// pretrained model loaded when no checkpoint is resumed.
struct FinetuneSchedule {
  std::int64_t epochs = 0;
  std::int64_t iterations_per_epoch = 0;
  // The train-split samples of iteration `iteration` (0-based, counting from the first epoch) on
  // this data-parallel rank; fewer than the micro-batch size for a kept partial last batch.
  std::function<std::vector<std::int64_t>(std::int64_t iteration)> train_samples;
  // Called on every rank when no checkpoint is resumed, after the model and optimizer are set up:
  // loads the pretrained weights.
  std::function<void()> initialise;
  // Called on every rank at the end of epoch `epoch` (0-based), after its checkpoint.
  std::function<void(std::int64_t epoch)> end_of_epoch;
};

class Trainer {
 public:
  Trainer(TrainerServices services, Model& model, Optimizer& optimizer, Dataset& dataset);
  // Fine-tuning: the loop follows `schedule` (the dataset's valid split is read round and round
  // for the periodic validation loss, as Megatron's infinite valid loader).
  Trainer(TrainerServices services, Model& model, Optimizer& optimizer, Dataset& dataset,
          FinetuneSchedule schedule);
  ~Trainer();
  // Builds data, model and optimizer state (loading [checkpoint] load when it holds a
  // checkpoint), then trains to train_iters.
  TrainSummary run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Installs SIGTERM/SIGINT handlers that ask the running loop to save and stop (the second signal
// ends the process at once). Returns whether a stop was requested.
void install_stop_signal_handlers();
bool stop_requested();
void reset_stop_request();  // tests

}  // namespace megatron::train
