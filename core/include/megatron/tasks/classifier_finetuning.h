// Fine-tuning and evaluating a classification or multiple-choice head (Megatron's
// tasks/finetune_utils.py and eval_utils.py), shared by the RACE, MNLI and QQP tasks: the model
// with its task head, the pretrained checkpoint, the training loop with per-epoch shuffles over
// the data-parallel ranks, and the accuracy of each validation set at every epoch's end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megatron/model.h"
#include "megatron/plugin.h"
#include "megatron/task.h"
#include "megatron/tasks/task_text.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::tasks {

// One sample: its sequences (1 for classification, the choices for multiple choice) and label.
struct LabelledSample {
  std::vector<TokenSequence> sequences;
  std::int32_t label = 0;
};

struct LabelledSet {
  std::string name;  // as Megatron names it, e.g. "dev-matched", "dev-middle"
  std::vector<LabelledSample> samples;
};

struct SetAccuracy {
  std::string name;
  std::int64_t correct = 0, total = 0;
};

// Reads the [task] keys every fine-tuning task has: epochs, keep_last, train_data, valid_data
// (declared by declare_finetuning_keys).
void declare_finetuning_keys(config::TableSchema& schema);

class ClassifierFinetuning {
 public:
  // `head`: the model's task head (classes or choices). `task_name` as Megatron's --task.
  ClassifierFinetuning(PluginContext& context, TaskHost& host, std::string task_name, TaskHead head,
                       const Tokenizer& tokenizer, std::int64_t seq_length);

  // With epochs > 0: trains on `train` for [task] epochs, reporting each validation set's
  // accuracy after every epoch; with 0: evaluates the pretrained checkpoint once (epoch -1).
  // Prints Megatron's lines, writes [task] results_file, returns the last overall accuracy.
  TaskResult run(const std::vector<LabelledSample>& train, const std::vector<LabelledSet>& valid);

 private:
  PluginContext& context_;
  TaskHost& host_;
  std::string task_name_;
  TaskHead head_;
  const Tokenizer& tokenizer_;
  std::int64_t seq_length_;
};

}  // namespace megatron::tasks
