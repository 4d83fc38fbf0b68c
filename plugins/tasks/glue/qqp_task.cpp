// Task plugin `qqp`: Megatron's QQP (tasks/glue): fine-tunes a BERT classification head on the
// GLUE TSV files and reports each validation file's accuracy after every epoch.
#include "glue_data.h"

namespace {

class QQPTask final : public megatron::Task {
 public:
  explicit QQPTask(megatron::PluginContext& context) : context_(context) {}
  megatron::TaskResult run(megatron::TaskHost& host) override {
    return megatron::glue::run_glue(megatron::glue::GlueTask::qqp, context_, host);
  }

 private:
  megatron::PluginContext& context_;
};

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& context) {
  return std::make_unique<QQPTask>(context);
}

const megatron::PluginDescriptor* descriptor() {
  static const megatron::PluginDescriptor d = megatron::make_plugin_descriptor(
      megatron::PluginKind::task, "qqp", "1.0.0",
      "QQP fine-tuning and accuracy of a BERT classification head (Megatron's QQP)",
      megatron::glue::declare_glue_config, create);
  return &d;
}

}  // namespace

MEGATRON_PLUGIN(descriptor)
