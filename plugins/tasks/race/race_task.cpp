// Task plugin `race`: Megatron's RACE (tasks/race): fine-tunes a BERT multiple-choice head on
// the RACE directories (*.txt files of JSON articles with questions, four options and answers)
// and reports each validation directory's accuracy after every epoch.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "megatron/error.h"
#include "megatron/task.h"
#include "megatron/tasks/classifier_finetuning.h"
#include "megatron/tasks/task_options.h"
#include "megatron/tasks/task_text.h"

namespace megatron::race {

namespace {

constexpr std::int64_t kChoices = 4;       // NUM_CHOICES
constexpr std::size_t kMaxQaLength = 128;  // MAX_QA_LENGTH

const nlohmann::json& member(const nlohmann::json& doc, const char* key, const std::string& where) {
  if (!doc.contains(key)) throw ConfigError(where + ": no \"" + std::string(key) + "\"");
  return doc[key];
}

// process_single_datapath: every *.txt file of the directory (sorted: Python's glob order is the
// file system's), every line a JSON article; one sample per question, its four options as four
// [CLS] qa [SEP] article [SEP] sequences.
std::vector<tasks::LabelledSample> read_race_dir(const std::string& dir, const Tokenizer& tok,
                                                 const tasks::BertSpecialTokens& sp,
                                                 std::int64_t seq, Logger& log) {
  if (!std::filesystem::is_directory(dir)) {
    throw ConfigError("RACE data '" + dir + "' is not a directory (of *.txt files)");
  }
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".txt") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<tasks::LabelledSample> samples;
  std::int64_t documents = 0, questions_seen = 0;
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    for (std::int64_t number = 1; std::getline(in, line); ++number) {
      const std::string where = file.string() + ":" + std::to_string(number);
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line);
        const std::string context =
            tasks::clean_text(member(doc, "article", where).get<std::string>());
        const nlohmann::json& questions = member(doc, "questions", where);
        const nlohmann::json& options = member(doc, "options", where);
        const nlohmann::json& answers = member(doc, "answers", where);
        if (!questions.is_array() || questions.size() != answers.size() ||
            questions.size() != options.size()) {
          throw ConfigError(where +
                            ": \"questions\", \"options\" and \"answers\" must be lists of "
                            "the same length");
        }
        ++documents;
        const std::vector<TokenId> context_ids = tok.encode(context);
        for (std::size_t q = 0; q < questions.size(); ++q) {
          ++questions_seen;
          const std::string question = questions[q].get<std::string>();
          const std::string answer = answers[q].get<std::string>();
          if (answer.size() != 1 || answer[0] < 'A' || answer[0] >= 'A' + kChoices) {
            throw ConfigError(where + ": question " + std::to_string(q + 1) + " has answer '" +
                              answer + "'; RACE answers are A, B, C or D");
          }
          if (!options[q].is_array() || options[q].size() != static_cast<std::size_t>(kChoices)) {
            throw ConfigError(where + ": question " + std::to_string(q + 1) + " has " +
                              std::to_string(options[q].size()) + " options; RACE has 4");
          }
          tasks::LabelledSample sample;
          sample.label = answer[0] - 'A';
          for (std::int64_t c = 0; c < kChoices; ++c) {
            const std::string choice = options[q][static_cast<std::size_t>(c)].get<std::string>();
            std::string qa;
            if (question.find('_') != std::string::npos) {
              qa = question;
              for (std::size_t at = qa.find('_'); at != std::string::npos;
                   at = qa.find('_', at + choice.size()))
                qa.replace(at, 1, choice);
            } else {
              qa = question + " " + choice;
            }
            std::vector<TokenId> qa_ids = tok.encode(tasks::clean_text(qa));
            if (qa_ids.size() > kMaxQaLength) qa_ids.resize(kMaxQaLength);
            sample.sequences.push_back(
                tasks::build_sequence(qa_ids, &context_ids, seq, sp.cls, sp.sep, sp.pad));
          }
          samples.push_back(std::move(sample));
        }
      } catch (const ConfigError&) {
        throw;
      } catch (const nlohmann::json::exception& e) {
        throw ConfigError(where + ": not a RACE article (" + e.what() + ")");
      } catch (const Error& e) {
        throw ConfigError(where + ": " + e.what());
      }
    }
  }
  log.info("RACE: {} documents, {} questions from {}", documents, questions_seen, dir);
  return samples;
}

void declare_config(config::TableSchema& s) {
  s.add({"seq_length",
         config::ValueKind::integer,
         config::Presence::required,
         std::int64_t{0},
         config::Range::at_least(3),
         {},
         "tokens per [CLS] qa [SEP] article [SEP] sequence (Megatron's --seq-length)"});
  tasks::declare_finetuning_keys(s);
  tasks::declare_task_keys(s, "BertWordPieceLowerCase");
}

class RaceTask final : public Task {
 public:
  explicit RaceTask(PluginContext& context) : context_(context) {}

  TaskResult run(TaskHost& host) override {
    const config::ConfigTable& t = context_.config;
    const std::int64_t seq = t.integer("seq_length");
    const auto tokenizer = tasks::task_tokenizer(t);
    const tasks::BertSpecialTokens sp = tasks::bert_special_tokens(t, *tokenizer);
    std::vector<tasks::LabelledSample> train;
    if (t.integer("epochs") > 0) {
      if (t.string_list("train_data").empty()) {
        t.fail("train_data", "required for fine-tuning (epochs > 0): RACE directories");
      }
      for (const std::string& dir : t.string_list("train_data")) {
        auto part = read_race_dir(dir, *tokenizer, sp, seq, context_.log);
        std::move(part.begin(), part.end(), std::back_inserter(train));
      }
    }
    if (t.string_list("valid_data").empty()) {
      t.fail("valid_data", "required: RACE directories, each reported on its own");
    }
    std::vector<tasks::LabelledSet> valid;
    for (const std::string& dir : t.string_list("valid_data")) {
      // datapath.split('RACE')[-1].strip('/').replace('/', '-')
      std::string name(tasks::strip_chars(tasks::after_last(dir, "RACE"), "/"));
      std::replace(name.begin(), name.end(), '/', '-');
      valid.push_back({name, read_race_dir(dir, *tokenizer, sp, seq, context_.log)});
    }
    tasks::ClassifierFinetuning finetuning(
        context_, host, "RACE", {TaskHead::Kind::multiple_choice, kChoices}, *tokenizer, seq);
    return finetuning.run(train, valid);
  }

 private:
  PluginContext& context_;
};

std::unique_ptr<Plugin> create(PluginContext& context) {
  return std::make_unique<RaceTask>(context);
}

const PluginDescriptor* descriptor() {
  static const PluginDescriptor d = make_plugin_descriptor(
      PluginKind::task, "race", "1.0.0",
      "RACE fine-tuning and accuracy of a BERT multiple-choice head (Megatron's RACE)",
      declare_config, create);
  return &d;
}

}  // namespace

}  // namespace megatron::race

MEGATRON_PLUGIN(megatron::race::descriptor)
