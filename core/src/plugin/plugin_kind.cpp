// Names of plugin kinds and the config tables that select them.
#include "megatron/dataset.h"
#include "megatron/model.h"
#include "megatron/optimizer.h"
#include "megatron/plugin.h"
#include "megatron/task.h"

namespace megatron {

// Out of line so the vtables and type_info live in the core, shared by host and plugins.
Plugin::~Plugin() = default;
Task::~Task() = default;
TaskHost::~TaskHost() = default;
Model::~Model() = default;
Optimizer::~Optimizer() = default;
Dataset::~Dataset() = default;

const char* plugin_kind_name(PluginKind kind) {
  switch (kind) {
    case PluginKind::model:
      return "model";
    case PluginKind::optimizer:
      return "optimizer";
    case PluginKind::dataset:
      return "dataset";
    case PluginKind::task:
      return "task";
  }
  return "unknown";
}

const char* plugin_kind_table(PluginKind kind) {
  switch (kind) {
    case PluginKind::model:
      return "model";
    case PluginKind::optimizer:
      return "optimizer";
    case PluginKind::dataset:
      return "data";
    case PluginKind::task:
      return "task";
  }
  return "unknown";
}

}  // namespace megatron
