// MNLI and QQP as Megatron's tasks/glue reads and fine-tunes them (glue_data.h).
#include "glue_data.h"

#include <fstream>

#include "megatron/error.h"
#include "megatron/tasks/classifier_finetuning.h"
#include "megatron/tasks/python_text.h"
#include "megatron/tasks/task_options.h"
#include "megatron/tasks/task_text.h"

namespace megatron::glue {

namespace {

const char* task_name(GlueTask task) {
  return task == GlueTask::mnli ? "MNLI" : "QQP";
}

std::vector<std::string> split_tabs(std::string_view line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t tab = line.find('\t', start);
    out.emplace_back(line.substr(start, tab == std::string_view::npos ? tab : tab - start));
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  return out;
}

std::string field(const std::vector<std::string>& row, std::size_t i) {
  return std::string(tasks::python_strip(row[i]));
}

// int(text) of a non-negative id or label; nullopt when it is not one.
std::optional<std::int64_t> parse_int(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::vector<GluePair> read_glue_file(GlueTask task, const std::string& file, Logger& log) {
  std::ifstream in(file);
  if (!in) throw ConfigError("cannot open GLUE file '" + file + "'");
  std::vector<GluePair> out;
  bool is_test = false;
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    const std::string where = file + ":" + std::to_string(number);
    // Megatron: line.strip().split('\t').
    const std::vector<std::string> row = split_tabs(tasks::python_strip(line));
    if (number == 1) {
      is_test = task == GlueTask::mnli ? row.size() == 10 : row.size() == 3;
      if (task == GlueTask::qqp && !is_test && row.size() != 6) {
        throw ConfigError(where + ": a QQP header has 6 columns (3 in a test file), found " +
                          std::to_string(row.size()));
      }
      continue;
    }
    GluePair pair;
    std::string uid;
    if (task == GlueTask::mnli) {
      if (row.size() < 10) {
        throw ConfigError(where +
                          ": an MNLI row has at least 10 tab-separated columns (id in "
                          "0, sentences in 8 and 9, the label last), found " +
                          std::to_string(row.size()));
      }
      uid = field(row, 0);
      pair.text_a = tasks::clean_text(field(row, 8));
      pair.text_b = tasks::clean_text(field(row, 9));
      const std::string label = is_test ? "contradiction" : field(row, row.size() - 1);
      if (label == "contradiction") {
        pair.label = 0;
      } else if (label == "entailment") {
        pair.label = 1;
      } else if (label == "neutral") {
        pair.label = 2;
      } else {
        throw ConfigError(where + ": unknown MNLI label '" + label +
                          "' (contradiction, entailment or neutral)");
      }
      if (pair.text_a.empty() || pair.text_b.empty()) {
        throw ConfigError(where + ": an empty sentence (columns 8 and 9)");
      }
    } else if (is_test) {
      if (row.size() != 3) {
        throw ConfigError(where + ": a QQP test row has 3 columns, found " +
                          std::to_string(row.size()));
      }
      uid = field(row, 0);
      pair.text_a = tasks::clean_text(field(row, 1));
      pair.text_b = tasks::clean_text(field(row, 2));
      if (pair.text_a.empty() || pair.text_b.empty()) {
        throw ConfigError(where + ": an empty question");
      }
    } else {
      // Megatron skips (with a warning) QQP rows that are not 6 columns or have an empty question.
      if (row.size() != 6) {
        log.warn("{}: a QQP row has 6 columns, found {}; skipped", where, row.size());
        continue;
      }
      uid = field(row, 0);
      pair.text_a = tasks::clean_text(field(row, 3));
      pair.text_b = tasks::clean_text(field(row, 4));
      if (pair.text_a.empty() || pair.text_b.empty()) {
        log.warn("{}: an empty question; skipped", where);
        continue;
      }
      const std::string label = field(row, 5);
      const auto value = parse_int(label);
      if (!value || *value > 1) {
        throw ConfigError(where + ": QQP's is_duplicate is 0 or 1, found '" + label + "'");
      }
      pair.label = static_cast<std::int32_t>(*value);
    }
    if (!parse_int(uid)) throw ConfigError(where + ": the id '" + uid + "' is not a number");
    out.push_back(std::move(pair));
  }
  log.info("{}: {} samples from {}{}", task_name(task), out.size(), file,
           is_test ? " (test file: dummy labels)" : "");
  return out;
}

std::string glue_set_name(GlueTask task, const std::string& path) {
  std::string name(tasks::strip_chars(
      tasks::strip_chars(tasks::after_last(path, task_name(task)), ".tsv"), "/"));
  for (char& c : name)
    if (c == '_') c = '-';
  return name;
}

void declare_glue_config(config::TableSchema& s) {
  s.add({"seq_length",
         config::ValueKind::integer,
         config::Presence::required,
         std::int64_t{0},
         config::Range::at_least(3),
         {},
         "tokens per [CLS] a [SEP] b [SEP] sequence (Megatron's --seq-length)"});
  tasks::declare_finetuning_keys(s);
  tasks::declare_task_keys(s, "BertWordPieceLowerCase");
}

TaskResult run_glue(GlueTask task, PluginContext& context, TaskHost& host) {
  const config::ConfigTable& t = context.config;
  const std::int64_t seq = t.integer("seq_length");
  const auto tokenizer = tasks::task_tokenizer(t);
  const tasks::BertSpecialTokens special = tasks::bert_special_tokens(t, *tokenizer);
  // GLUEAbstractDataset.__getitem__: both texts tokenized, [CLS] a [SEP] b [SEP].
  auto samples_of = [&](const std::vector<GluePair>& pairs, const std::string& file) {
    std::vector<tasks::LabelledSample> out;
    for (const GluePair& p : pairs) {
      try {
        const std::vector<TokenId> a = tokenizer->encode(p.text_a), b = tokenizer->encode(p.text_b);
        out.push_back(
            {{tasks::build_sequence(a, &b, seq, special.cls, special.sep, special.pad)}, p.label});
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        throw ConfigError(file + ": " + e.what());
      }
    }
    return out;
  };
  std::vector<tasks::LabelledSample> train;
  if (t.integer("epochs") > 0) {
    if (t.string_list("train_data").empty()) {
      t.fail("train_data", "required for fine-tuning (epochs > 0): the training TSV file(s)");
    }
    for (const std::string& file : t.string_list("train_data")) {
      const auto part = samples_of(read_glue_file(task, file, context.log), file);
      train.insert(train.end(), part.begin(), part.end());
    }
  }
  if (t.string_list("valid_data").empty()) {
    t.fail("valid_data", "required: the validation TSV file(s), each reported on its own");
  }
  std::vector<tasks::LabelledSet> valid;
  for (const std::string& file : t.string_list("valid_data")) {
    valid.push_back(
        {glue_set_name(task, file), samples_of(read_glue_file(task, file, context.log), file)});
  }
  const std::int64_t classes = task == GlueTask::mnli ? 3 : 2;
  tasks::ClassifierFinetuning finetuning(
      context, host, task_name(task), {TaskHead::Kind::classification, classes}, *tokenizer, seq);
  return finetuning.run(train, valid);
}

}  // namespace megatron::glue
