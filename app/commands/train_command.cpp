// `megatron-app [train] --config FILE`: runs what the config asks for on every rank.
#include <iostream>

#include "cli.h"
#include "commands/commands.h"
#include "commands/memory_preflight.h"
#include "megatron/backend/backend.h"
#include "megatron/dataset.h"
#include "megatron/error.h"
#include "megatron/model.h"
#include "megatron/optimizer.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/task.h"
#include "megatron/train/trainer.h"
#include "plugin_objects.h"
#include "session.h"

namespace megatron::app {

namespace po = boost::program_options;

namespace {

// The host side of a task: the config's other plugins, created through the session's catalog.
class SessionTaskHost final : public TaskHost {
 public:
  SessionTaskHost(Session& session, ParallelState& parallel)
      : session_(session), parallel_(parallel) {}

  std::unique_ptr<Model> create_model() override {
    return create_plugin<Model>(session_, parallel_, "model", "megatron::Model", "type = \"gpt\"");
  }
  std::string model_type() const override {
    const SelectedPlugin* model = session_.selected_for("model");
    return model ? model->record->name : std::string();
  }
  std::unique_ptr<Optimizer> create_optimizer() override {
    return create_plugin<Optimizer>(session_, parallel_, "optimizer", "megatron::Optimizer",
                                    "type = \"adam\"");
  }
  std::string config_toml() const override { return session_.config.to_toml(); }

 private:
  Session& session_;
  ParallelState& parallel_;
};

int run_task(Session& session, ParallelState& parallel, const SelectedPlugin& task_plugin) {
  PluginContext context{*session.log, parallel, session.config.table(task_plugin.table),
                        session.config.core()};
  std::unique_ptr<Plugin> object = session.catalog.create(*task_plugin.record, context);
  auto* task = dynamic_cast<Task*>(object.get());
  if (!task) {
    throw PluginError("task plugin '" + task_plugin.record->name + "' (" +
                      task_plugin.record->file.string() +
                      ") created an object that does not implement megatron::Task");
  }
  session.log->info("running task '{}'", task_plugin.record->name);
  SessionTaskHost host(session, parallel);
  const TaskResult result = task->run(host);
  for (const auto& [name, value] : result.metrics) {
    session.log->info("task {} | {}: {:.6g}", task_plugin.record->name, name, value);
  }
  return 0;
}

int run_training(Session& session, ParallelState& parallel, MpiRuntime& runtime,
                 const std::string& config_file) {
  // Before any dataset index or parameter is allocated.
  check_memory(session, runtime, parallel.device(), config_file);
  auto dataset =
      create_plugin<Dataset>(session, parallel, "data", "megatron::Dataset", "type = \"gpt\"");
  auto model =
      create_plugin<Model>(session, parallel, "model", "megatron::Model", "type = \"gpt\"");
  auto optimizer = create_plugin<Optimizer>(session, parallel, "optimizer", "megatron::Optimizer",
                                            "type = \"adam\"");
  // Before any work: the model must find every field it reads in the dataset's samples.
  check_sample_fields(model->input_fields(), session.selected_for("model")->record->name,
                      dataset->sample_fields(), session.selected_for("data")->record->name);
  train::Trainer trainer({*session.log, parallel, session.config.core(), session.config.to_toml()},
                         *model, *optimizer, *dataset);
  const train::TrainSummary summary = trainer.run();
  session.log->info(
      "{} at iteration {} ({} samples){}", summary.interrupted ? "stopped" : "finished",
      summary.iteration, summary.consumed_samples,
      summary.last_checkpoint.empty() ? "" : "; checkpoint " + summary.last_checkpoint);
  return 0;
}

}  // namespace

int run_train(MpiRuntime& runtime, const std::vector<std::string>& args) {
  CommonOptions common;
  po::options_description options(
      "megatron-app [train] --config FILE [--set TABLE.KEY=VALUE ...]\n"
      "Runs the job the config describes on every rank: the [task] it names, or model training.\n"
      "Launch with mpirun/srun for several ranks.\n\nOptions");
  add_common_options(options, common, true);
  parse_arguments("train", args, options, common.help);
  if (common.help) {
    std::cout << options << "\n";
    return 0;
  }

  Session session = open_session(runtime, common, {});
  if (common.print_config) {
    if (runtime.world_rank() == 0) std::cout << session.config.to_toml();
    return 0;
  }

  set_compute_threads(session.config.core().runtime.threads);
  ParallelState parallel =
      ParallelState::create(runtime, parallel_sizes(session.config.core().parallel),
                            session.config.core().runtime.device);
  session.log->info(
      "world {}: tensor {} x pipeline {} x context {} x data {}; {} compute thread(s)",
      parallel.world_size(), parallel.tp_size(), parallel.pp_size(), parallel.cp_size(),
      parallel.dp_size(), compute_threads());
  session.log->info("kernels: {}", backend_for(parallel.device()).describe());

  if (const SelectedPlugin* task = session.selected_for("task")) {
    return run_task(session, parallel, *task);
  }
  if (session.selected_for("model")) {
    return run_training(session, parallel, runtime, common.config_file);
  }
  throw UsageError(
      "nothing to run: the config has no [task] table and no [model] table (see "
      "`megatron-app plugins` for what is available)");
}

}  // namespace megatron::app
