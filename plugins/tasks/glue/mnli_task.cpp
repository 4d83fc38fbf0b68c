// Task plugin `mnli`: Megatron's MNLI (tasks/glue): fine-tunes a BERT classification head on the
// GLUE TSV files and reports each validation file's accuracy after every epoch.
#include "glue_data.h"

namespace {

class MNLITask final : public megatron::Task {
 public:
  explicit MNLITask(megatron::PluginContext& context) : context_(context) {}
  megatron::TaskResult run(megatron::TaskHost& host) override {
    return megatron::glue::run_glue(megatron::glue::GlueTask::mnli, context_, host);
  }

 private:
  megatron::PluginContext& context_;
};

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& context) {
  return std::make_unique<MNLITask>(context);
}

const megatron::PluginDescriptor* descriptor() {
  static const megatron::PluginDescriptor d = megatron::make_plugin_descriptor(
      megatron::PluginKind::task, "mnli", "1.0.0",
      "MNLI fine-tuning and accuracy of a BERT classification head (Megatron's MNLI)",
      megatron::glue::declare_glue_config, create);
  return &d;
}

}  // namespace

MEGATRON_PLUGIN(descriptor)
