// Task plugin `lambada`: Megatron's LAMBADA zero-shot cloze accuracy (tasks/zeroshot_gpt): for
// each JSONL line {"text": ...}, is the model's argmax right at every token of the last word (or,
// without strict_lambada, at the last BPE token)? Printed as Megatron prints it, written as JSON.
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "megatron/error.h"
#include "megatron/task.h"
#include "megatron/tasks/lm_evaluator.h"
#include "megatron/tasks/python_text.h"
#include "megatron/tasks/task_options.h"

namespace megatron::lambada {

namespace {

void declare_config(config::TableSchema& s) {
  s.path_list("valid_data", "the LAMBADA test set as JSONL lines {\"text\": ...}, exactly one file")
      .add({"seq_length",
            config::ValueKind::integer,
            config::Presence::required,
            std::int64_t{0},
            config::Range::positive(),
            {},
            "sample length in tokens (Megatron's --seq-length); longer samples are refused"})
      .boolean("strict_lambada", false,
               "the target is the whole last word, which must be predicted token by token "
               "(Megatron's --strict-lambada); otherwise the last BPE token");
  tasks::declare_task_keys(s, "GPT2BPETokenizer");
}

// Megatron's _LambadaDataset.get_tokens and __getitem__: context then target tokens, padded to
// seq + 1 with EOD; only the target positions count.
tasks::LmSample make_sample(const Tokenizer& tokenizer, const std::string& text, bool strict,
                            std::int64_t seq, const std::string& where) {
  std::vector<TokenId> context, target;
  if (!strict) {
    context = tokenizer.encode(text);
    if (context.empty()) throw ConfigError(where + ": the text has no tokens");
    target.push_back(context.back());
    context.pop_back();
  } else {
    const std::vector<std::string_view> words = tasks::python_split(text);
    if (words.empty()) throw ConfigError(where + ": the text has no words");
    const std::string last(words.back());
    const std::size_t start = text.rfind(last);
    context = tokenizer.encode(tasks::python_strip(std::string_view(text).substr(0, start)));
    target = tokenizer.encode(" " + last);
  }
  tasks::LmSample s;
  s.tokens = context;
  s.tokens.insert(s.tokens.end(), target.begin(), target.end());
  const auto n = static_cast<std::int64_t>(s.tokens.size());
  if (n > seq + 1) {
    throw ConfigError(where + ": " + std::to_string(n) + " tokens, more than seq_length + 1 = " +
                      std::to_string(seq + 1) + " (raise [task] seq_length)");
  }
  // pad_mask[1:] of [0] * context + [1] * target + [0] * pad.
  std::vector<std::uint8_t> pad_mask(context.size(), 0);
  pad_mask.resize(context.size() + target.size(), 1);
  pad_mask.resize(static_cast<std::size_t>(seq + 1), 0);
  s.loss_mask.assign(pad_mask.begin() + 1, pad_mask.end());
  s.tokens.resize(static_cast<std::size_t>(seq + 1), tokenizer.eod());
  return s;
}

class LambadaTask final : public Task {
 public:
  explicit LambadaTask(PluginContext& context) : context_(context) {}

  TaskResult run(TaskHost& host) override {
    const config::ConfigTable& t = context_.config;
    const std::string& file = tasks::single_valid_file(t, "LAMBADA");
    const std::int64_t seq = t.integer("seq_length");
    const bool strict = t.boolean("strict_lambada");
    const auto tokenizer = tasks::task_tokenizer(t);

    std::ifstream in(file);
    if (!in) t.fail("valid_data", "cannot open '" + file + "'");
    std::vector<tasks::LmSample> samples;
    std::string line;
    for (std::int64_t number = 1; std::getline(in, line); ++number) {
      const std::string where = file + ":" + std::to_string(number);
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw ConfigError(where + ": not a JSON object (" + e.what() + ")");
      }
      if (!doc.is_object() || !doc.contains("text") || !doc["text"].is_string()) {
        throw ConfigError(where + ": expected an object with a string \"text\"");
      }
      try {
        samples.push_back(
            make_sample(*tokenizer, doc["text"].get<std::string>(), strict, seq, where));
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        throw ConfigError(where + ": " + e.what());
      }
    }
    if (samples.empty()) throw ConfigError(file + ": no samples (the file is empty)");
    context_.log.info("LAMBADA: {} samples from {}{}", samples.size(), file,
                      strict ? " (strict)" : "");

    tasks::LmEvaluator evaluator(context_, host, "LAMBADA", *tokenizer, seq,
                                 tasks::task_checkpoint(context_));
    const tasks::LmTotals totals = evaluator.evaluate(samples, true);
    const auto total = static_cast<std::int64_t>(samples.size());
    const double accuracy = static_cast<double>(totals.correct) / static_cast<double>(total);
    tasks::print_result_box(
        context_,
        fmt::format(" validation results on LAMBADA | number correct: {:.4E} | total "
                    "examples: {:.4E} | avg accuracy: {:.4E}",
                    static_cast<double>(totals.correct), static_cast<double>(total), accuracy));
    tasks::write_task_results(
        context_, {{"task", std::string("LAMBADA")},
                   {"correct", totals.correct},
                   {"total", total},
                   {"accuracy", accuracy},
                   // Not Megatron's: the targets' mean cross-entropy.
                   {"num_targets", totals.targets},
                   {"target_loss", totals.loss_sum / static_cast<double>(totals.targets)},
                   {"strict_lambada", std::string(strict ? "true" : "false")}});
    return {{{"number correct", static_cast<double>(totals.correct)},
             {"total examples", static_cast<double>(total)},
             {"avg accuracy", accuracy}}};
  }

 private:
  PluginContext& context_;
};

std::unique_ptr<Plugin> create(PluginContext& context) {
  return std::make_unique<LambadaTask>(context);
}

const PluginDescriptor* descriptor() {
  static const PluginDescriptor d = make_plugin_descriptor(
      PluginKind::task, "lambada", "1.0.0",
      "LAMBADA cloze accuracy of a pretrained language model (Megatron's LAMBADA)", declare_config,
      create);
  return &d;
}

}  // namespace

}  // namespace megatron::lambada

MEGATRON_PLUGIN(megatron::lambada::descriptor)
