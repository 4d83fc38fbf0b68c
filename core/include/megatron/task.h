// The interface of task plugins: evaluations and other jobs chosen by the [task] table.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "megatron/plugin.h"

namespace megatron {

struct TaskResult {
  // Named figures in the order they should be reported, e.g. {"accuracy", 0.71}.
  std::vector<std::pair<std::string, double>> metrics;
};

class Task : public Plugin {
 public:
  ~Task() override;
  // Runs on every rank; collective work goes through PluginContext::parallel.
  virtual TaskResult run() = 0;
};

}  // namespace megatron
