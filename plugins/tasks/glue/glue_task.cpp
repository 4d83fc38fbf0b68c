// Task plugins `mnli` and `qqp`: Megatron's MNLI and QQP (tasks/glue), one source built twice
// (GLUE_TASK_MNLI or GLUE_TASK_QQP): fine-tunes a BERT classification head on the GLUE TSV files
// and reports each validation file's accuracy after every epoch.
#include "glue_data.h"

namespace {

#if defined(GLUE_TASK_MNLI)
constexpr megatron::glue::GlueTask kTask = megatron::glue::GlueTask::mnli;
constexpr const char* kName = "mnli";
constexpr const char* kDescription =
    "MNLI fine-tuning and accuracy of a BERT classification head (Megatron's MNLI)";
#elif defined(GLUE_TASK_QQP)
constexpr megatron::glue::GlueTask kTask = megatron::glue::GlueTask::qqp;
constexpr const char* kName = "qqp";
constexpr const char* kDescription =
    "QQP fine-tuning and accuracy of a BERT classification head (Megatron's QQP)";
#else
#error "define GLUE_TASK_MNLI or GLUE_TASK_QQP"
#endif

class GlueTaskPlugin final : public megatron::Task {
 public:
  explicit GlueTaskPlugin(megatron::PluginContext& context) : context_(context) {}
  megatron::TaskResult run(megatron::TaskHost& host) override {
    return megatron::glue::run_glue(kTask, context_, host);
  }

 private:
  megatron::PluginContext& context_;
};

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& context) {
  return std::make_unique<GlueTaskPlugin>(context);
}

const megatron::PluginDescriptor* descriptor() {
  static const megatron::PluginDescriptor d =
      megatron::make_plugin_descriptor(megatron::PluginKind::task, kName, "1.0.0", kDescription,
                                       megatron::glue::declare_glue_config, create);
  return &d;
}

}  // namespace

MEGATRON_PLUGIN(descriptor)
