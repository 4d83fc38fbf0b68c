// What every downstream task's [task] table has: the tokenizer (Megatron's --tokenizer-type,
// --vocab-file, --merge-file, --tokenizer-model), the pretrained checkpoint and the results file,
// and the JSON the results are written as.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/plugin.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::tasks {

// tokenizer_type (default `default_type`), vocab_file, merge_file, tokenizer_model,
// pretrained_checkpoint, results_file.
void declare_task_keys(config::TableSchema& schema, const std::string& default_type);

// The tokenizer the table names; problems are ConfigErrors on the key at fault.
std::unique_ptr<Tokenizer> task_tokenizer(const config::ConfigTable& table);

// The [CLS], [SEP] and [PAD] ids the BERT tasks build their sequences from; a tokenizer without
// one is a ConfigError on tokenizer_type.
struct BertSpecialTokens {
  TokenId cls = 0, sep = 0, pad = 0;
};
BertSpecialTokens bert_special_tokens(const config::ConfigTable& table, const Tokenizer& tokenizer);

// [task] valid_data of a task that evaluates exactly one file (ConfigError on the key otherwise).
const std::string& single_valid_file(const config::ConfigTable& table, const std::string& task);

// Megatron's evaluate_and_print_results box: `line` between two rules of dashes, printed by the
// last world rank.
void print_result_box(const PluginContext& context, const std::string& line);

// [task] pretrained_checkpoint, else [checkpoint] load; ConfigError when neither is set.
std::filesystem::path task_checkpoint(const PluginContext& context);

// One figure of a results file: a count or a measurement.
using ResultValue = std::variant<std::int64_t, double, std::string>;
using Results = std::vector<std::pair<std::string, ResultValue>>;

// Writes `results` as one JSON object (keys in order) to [task] results_file, when set, from the
// last world rank (the one that prints); throws Error naming the file when it cannot be written.
void write_task_results(const PluginContext& context, const Results& results);
// The same for results already serialised as JSON text.
void write_task_results_json(const PluginContext& context, const std::string& json_text);

}  // namespace megatron::tasks
