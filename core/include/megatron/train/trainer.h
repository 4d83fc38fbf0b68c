// The training loop: micro-batches with gradient accumulation, data-parallel gradient reduction,
// loss scaling, clipping, the optimizer step, LR schedule, evaluation, logging in Megatron's
// format, periodic and signal-triggered checkpoints, and exact resume.
#pragma once

#include <cstdint>
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

class Trainer {
 public:
  Trainer(TrainerServices services, Model& model, Optimizer& optimizer, Dataset& dataset);
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
