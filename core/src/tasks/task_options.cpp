// The [task] keys shared by the downstream tasks and their results file
// (megatron/tasks/task_options.h).
#include "megatron/tasks/task_options.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "megatron/data/tokenizer_vocabulary.h"
#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/tokenizer/sentencepiece_tokenizer.h"

namespace megatron::tasks {

void declare_task_keys(config::TableSchema& s, const std::string& default_type) {
  s.string("tokenizer_type", default_type, "Megatron's --tokenizer-type")
      .optional_path("vocab_file", "tokenizer vocabulary (encoder.json for GPT2BPETokenizer)")
      .optional_path("merge_file", "BPE merges (vocab.bpe for GPT2BPETokenizer)")
      .optional_path("tokenizer_model",
                     "SentencePiece model (.model) for GPTSentencePieceTokenizer and "
                     "SentencePieceTokenizer")
      .optional_path("pretrained_checkpoint",
                     "checkpoint to evaluate or fine-tune from: a directory (its latest) or an "
                     ".h5 file, saved at any parallel layout (default: [checkpoint] load)")
      .optional_path("results_file", "where to write the metrics as JSON");
}

std::unique_ptr<Tokenizer> task_tokenizer(const config::ConfigTable& t) {
  TokenizerFiles files;
  if (t.has("vocab_file")) files.vocab_file = t.string("vocab_file");
  if (t.has("merge_file")) files.merge_file = t.string("merge_file");
  if (t.has("tokenizer_model")) files.tokenizer_model = t.string("tokenizer_model");
  const std::string& type = t.string("tokenizer_type");
  if (type == "GPT2BPETokenizer") {
    for (const char* key : {"vocab_file", "merge_file"})
      if (!t.has(key)) t.fail(key, "required key is missing: GPT2BPETokenizer needs it");
  } else if (is_sentencepiece_tokenizer_type(type)) {
    if (!t.has("tokenizer_model")) {
      t.fail("tokenizer_model", "required key is missing: " + type + " needs it");
    }
  } else if (!t.has("vocab_file")) {
    t.fail("vocab_file", "required key is missing: " + type + " needs it");
  }
  try {
    return make_tokenizer(type, files);
  } catch (const UsageError& e) {
    t.fail("tokenizer_type", e.what());
  } catch (const Error& e) {
    // A SentencePiece model that cannot be loaded is the fault of the one key naming it.
    t.fail(is_sentencepiece_tokenizer_type(type) ? "tokenizer_model" : "tokenizer_type", e.what());
  }
}

BertSpecialTokens bert_special_tokens(const config::ConfigTable& t, const Tokenizer& tokenizer) {
  auto id = [&](SpecialToken role, const char* name) {
    try {
      return static_cast<TokenId>(data::required_special_token(tokenizer, role, name));
    } catch (const Error& e) {
      t.fail("tokenizer_type", e.what());
    }
  };
  return {id(SpecialToken::cls, "[CLS]"), id(SpecialToken::sep, "[SEP]"),
          id(SpecialToken::pad, "[PAD]")};
}

const std::string& single_valid_file(const config::ConfigTable& t, const std::string& task) {
  const std::vector<std::string>& files = t.string_list("valid_data");
  if (files.size() != 1) {
    t.fail("valid_data", task + " evaluates exactly one file, got " + std::to_string(files.size()));
  }
  return files.front();
}

void print_result_box(const PluginContext& context, const std::string& line) {
  if (context.parallel.world_rank() != context.parallel.world_size() - 1) return;
  const std::string rule(line.size() + 1, '-');
  std::cout << rule << "\n" << line << "\n" << rule << std::endl;
}

std::filesystem::path task_checkpoint(const PluginContext& context) {
  if (context.config.has("pretrained_checkpoint")) {
    const std::filesystem::path path = context.config.string("pretrained_checkpoint");
    if (!std::filesystem::exists(path)) {
      context.config.fail("pretrained_checkpoint", "'" + path.string() + "' does not exist");
    }
    return path;
  }
  if (!context.core.checkpoint.load.empty()) return context.core.checkpoint.load;
  context.config.fail("pretrained_checkpoint",
                      "required key is missing: name the checkpoint to evaluate (a directory or "
                      "an .h5 file), or set [checkpoint] load");
}

void write_task_results(const PluginContext& context, const Results& results) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [key, value] : results)
    std::visit([&](const auto& v) { out[key] = v; }, value);
  write_task_results_json(context, out.dump(2));
}

void write_task_results_json(const PluginContext& context, const std::string& json_text) {
  if (!context.config.has("results_file")) return;
  if (context.parallel.world_rank() != context.parallel.world_size() - 1) return;
  const std::string file = context.config.string("results_file");
  // As for checkpoints: a missing directory is created (a fresh clone has no checkpoints/).
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (error) {
    throw Error("cannot create the directory of [task] results_file '" + file +
                "': " + error.message());
  }
  std::ofstream stream(file);
  stream << json_text << "\n";
  stream.close();
  if (!stream) throw Error("cannot write [task] results_file '" + file + "'");
}

}  // namespace megatron::tasks
