// Megatron's GLUE readers (tasks/glue/mnli.py, qqp.py): the TSV files' rows as labelled sentence
// pairs, each file's name as Megatron derives it, and the task plugins' shared run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megatron/plugin.h"
#include "megatron/task.h"

namespace megatron::glue {

struct GluePair {
  std::string text_a, text_b;  // cleaned (clean_text)
  std::int32_t label = 0;
};

enum class GlueTask { mnli, qqp };

// Reads one TSV file of `task` (header skipped; a test file's dummy label). Throws ConfigError
// naming the file and line for a malformed row or an unknown label.
std::vector<GluePair> read_glue_file(GlueTask task, const std::string& file, Logger& log);

// Megatron's dataset name: path.split(TASK)[-1].strip('.tsv').strip('/').replace('_', '-').
std::string glue_set_name(GlueTask task, const std::string& path);

// The [task] keys of MNLI and QQP.
void declare_glue_config(config::TableSchema& schema);
// Fine-tunes (or evaluates) the [model] on the task's files: tasks/glue/finetune.py.
TaskResult run_glue(GlueTask task, PluginContext& context, TaskHost& host);

}  // namespace megatron::glue
