// The objects a job is built from: the parallel layout of the config and the plugin object a
// config table selects, checked against the interface it must have.
#pragma once

#include <memory>
#include <string>

#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"
#include "session.h"

namespace megatron::app {

// The parallel layout the config's [parallel] table asks for.
inline ParallelSizes parallel_sizes(const config::ParallelConfig& p) {
  ParallelSizes s;
  s.tensor = p.tensor_model_parallel_size;
  s.pipeline = p.pipeline_model_parallel_size;
  s.context = p.context_parallel_size;
  s.expert = p.expert_model_parallel_size;
  s.expert_tensor = p.expert_tensor_parallel_size;
  s.order = p.rank_order();
  return s;
}

// The object of the plugin `table` selects, as T; UsageError naming the table when the config
// has none (`example` shows what to write), PluginError when the object is not a T.
template <typename T>
std::unique_ptr<T> create_plugin(Session& session, ParallelState& parallel, const char* table,
                                 const char* interface, const char* example) {
  const SelectedPlugin* selected = session.selected_for(table);
  if (!selected) {
    throw UsageError(std::string("this job needs a [") + table + "] table (e.g. " + example + ")");
  }
  PluginContext context{*session.log, parallel, session.config.table(selected->table),
                        session.config.core()};
  std::unique_ptr<Plugin> object = session.catalog.create(*selected->record, context);
  T* typed = dynamic_cast<T*>(object.get());
  if (!typed) {
    throw PluginError(std::string(table) + " plugin '" + selected->record->name + "' (" +
                      selected->record->file.string() +
                      ") created an object that does not implement " + interface);
  }
  object.release();
  return std::unique_ptr<T>(typed);
}

}  // namespace megatron::app
