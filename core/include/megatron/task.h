// The interface of task plugins: evaluations, fine-tuning and other jobs chosen by the [task]
// table, and what the host gives them to build and run models.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "megatron/plugin.h"

namespace megatron {

class Model;
class Optimizer;

struct TaskResult {
  // Named figures in the order they should be reported, e.g. {"accuracy", 0.71}.
  std::vector<std::pair<std::string, double>> metrics;
};

// What the host lends a running task beyond its PluginContext: the plugins the config's other
// tables select, created through the same catalog as for training. Everything else a task needs
// is in the SDK as functions over the parallel state: model_build_info (train/model_setup.h),
// load_pretrained (train/pretrained.h), ForwardRunner (train/forward_runner.h), make_tokenizer.
class TaskHost {
 public:
  virtual ~TaskHost();
  // The [model] table's plugin, created but not built (ConfigError when the config has none).
  virtual std::unique_ptr<Model> create_model() = 0;
  // Its plugin name ("gpt", "bert"): the [model] type.
  virtual std::string model_type() const = 0;
  // The [optimizer] table's plugin (ConfigError when the config has none).
  virtual std::unique_ptr<Optimizer> create_optimizer() = 0;
  // The resolved config (--print-config text), stored in the checkpoints a task saves.
  virtual std::string config_toml() const = 0;
};

class Task : public Plugin {
 public:
  ~Task() override;
  // Runs on every rank; collective work goes through PluginContext::parallel.
  virtual TaskResult run(TaskHost& host) = 0;
};

}  // namespace megatron
