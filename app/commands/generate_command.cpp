// `megatron-app generate --config FILE --prompt TEXT ...`: text from a trained decoder-only
// language model (GPT, Mamba/hybrid, MoE GPT), greedy or with Megatron's sampling, on one rank
// or with tensor parallelism under mpirun (rank 0 leads); decoded with the KV cache and Mamba
// state where every block can (LayerStackModel::can_decode), else each new token recomputes the
// whole sequence.
#include <chrono>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands/commands.h"
#include "commands/generation_model.h"
#include "megatron/error.h"
#include "megatron/inference/engine.h"
#include "megatron/inference/sampling.h"

namespace megatron::app {

namespace po = boost::program_options;

namespace {

struct GenerateOptions {
  std::string load;
  std::vector<std::string> prompts;
  std::string prompts_file;
  std::int64_t tokens_to_generate = 64;
  inference::SamplingParams sampling;
  std::uint64_t seed = 1234;
  bool stop_on_eol = false;
  bool stop_on_double_eol = false;
  std::string output_json;
  bool recompute = false;  // no KV cache (also when the model cannot decode incrementally)
  std::int64_t max_batch = 8;
  std::int64_t top_logprobs = 0;
};

// The prompts of --prompt (in order) and --prompts-file (one a line).
std::vector<std::string> read_prompts(const GenerateOptions& o) {
  std::vector<std::string> prompts = o.prompts;
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    if (!in)
      throw UsageError("megatron-app generate: --prompts-file: cannot read " + o.prompts_file);
    for (std::string line; std::getline(in, line);)
      prompts.push_back(line);
  }
  if (prompts.empty()) {
    throw UsageError("megatron-app generate: give a --prompt or a --prompts-file");
  }
  return prompts;
}

struct Generated {
  std::vector<TokenId> prompt, tokens;
  std::string text;        // the continuation
  std::string stopped_by;  // "length", "eod", "eol", "double eol", "seq_length"
  // --top-logprobs N: each generated token's log-probability and the N most likely (id, lp).
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<TokenId, float>>> top_logprobs;
};

// Collects one prompt's tokens as the engine reports them.
class Collector : public inference::GenerationSink {
 public:
  explicit Collector(Generated& out) : out_(out) {}
  void token(const Token& token) override {
    out_.tokens.push_back(token.id);
    out_.logprobs.push_back(token.logprob);
    out_.top_logprobs.push_back(token.top);
  }
  void finished(inference::StopReason reason, const std::string& error) override {
    if (!error.empty()) throw Error("megatron-app generate: " + error);
    out_.stopped_by = inference::stop_reason_name(reason);
  }

 private:
  Generated& out_;
};

// Every prompt through the engine (decoding together, up to --max-batch at a time), each with
// its own random stream from --seed.
std::vector<Generated> generate_all(inference::Decoder& decoder, const Tokenizer& tokenizer,
                                    const std::vector<std::string>& prompts,
                                    const GenerateOptions& o, Logger& log) {
  const auto vocab = static_cast<std::int64_t>(tokenizer.vocab_size());
  inference::Engine engine(decoder, tokenizer, vocab, o.max_batch);
  std::vector<Generated> results(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Generated& out = results[i];
    out.prompt = tokenizer.encode(prompts[i]);
    inference::GenerationRequest request;
    // An empty prompt starts from the end-of-document token, as an unconditional sample.
    request.prompt = out.prompt.empty() ? std::vector<TokenId>{tokenizer.eod()} : out.prompt;
    if (static_cast<std::int64_t>(request.prompt.size()) >= decoder.max_tokens()) {
      throw UsageError(fmt::format(
          "megatron-app generate: prompt {} has {} tokens; the model reads at most {} ([data] "
          "seq_length), so no token is left to generate",
          i + 1, request.prompt.size(), decoder.max_tokens()));
    }
    request.tokens_to_generate = o.tokens_to_generate;
    request.sampling = o.sampling;
    request.seed = o.seed;
    request.stop_on_eol = o.stop_on_eol;
    request.stop_on_double_eol = o.stop_on_double_eol;
    request.top_logprobs = o.top_logprobs;
    engine.submit(std::move(request), std::make_shared<Collector>(out));
  }
  const auto start = std::chrono::steady_clock::now();
  while (engine.pending() > 0)
    engine.step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::size_t generated = 0;
  for (Generated& out : results) {
    out.text = tokenizer.decode(out.tokens);
    generated += out.tokens.size();
  }
  log.info("generated {} tokens for {} prompts in {:.3f} s ({:.1f} tokens/s, prefill included)",
           generated, prompts.size(), seconds, static_cast<double>(generated) / seconds);
  return results;
}

po::options_description describe_options(CommonOptions& common, GenerateOptions& o) {
  po::options_description d(
      "megatron-app generate --config FILE [--load CKPT] --prompt TEXT [options]\n"
      "Generates text from the checkpoint of a decoder-only language model of the config ([model]\n"
      "gpt, mamba, ...; its [data] plugin gives the tokenizer and the sequence length). Prints\n"
      "each prompt followed by its continuation. Greedy with --top-k 1; otherwise Megatron's\n"
      "sampling (temperature, then top-k or top-p), never producing a padded-vocabulary id, from\n"
      "--seed. Stops at the end-of-document token, after --tokens-to-generate tokens, or when the\n"
      "sequence reaches [data] seq_length. One rank, or mpirun -n TP*PP with [parallel]\n"
      "tensor_model_parallel_size = TP, pipeline_model_parallel_size = PP (rank 0 prints). "
      "Attention decodes with a KV cache and\n"
      "Mamba layers with their conv and SSM state (a block that keeps neither, e.g. Retro's,\n"
      "recomputes the whole sequence for each token).\n\n"
      "Options");
  add_common_options(d, common, true);
  d.add_options()  //
      ("load", po::value(&o.load)->value_name("CKPT"),
       "checkpoint file or directory (default: [checkpoint] load, else save)")  //
      ("prompt", po::value(&o.prompts)->composing()->value_name("TEXT"),
       "a prompt (repeatable)")                                                                //
      ("prompts-file", po::value(&o.prompts_file)->value_name("FILE"), "prompts, one a line")  //
      ("tokens-to-generate", po::value(&o.tokens_to_generate)->default_value(64)->value_name("N"),
       "at most N new tokens a prompt")  //
      ("temperature", po::value(&o.sampling.temperature)->default_value(1.0)->value_name("T"),
       "logits divided by T before sampling, in (0, 100]")  //
      ("top-k", po::value(&o.sampling.top_k)->default_value(0)->value_name("K"),
       "1: greedy; K > 1: sample among the K most likely")  //
      ("top-p", po::value(&o.sampling.top_p)->default_value(0.0)->value_name("P"),
       "sample among the most likely tokens reaching probability P")  //
      ("top-p-decay", po::value(&o.sampling.top_p_decay)->default_value(0.0)->value_name("D"),
       "top-p times D after each token")  //
      ("top-p-bound", po::value(&o.sampling.top_p_bound)->default_value(0.0)->value_name("B"),
       "top-p never decays below B")  //
      ("seed", po::value(&o.seed)->default_value(1234)->value_name("N"),
       "the sampling's random seed (each prompt starts from it)")                            //
      ("stop-on-eol", po::bool_switch(&o.stop_on_eol), "stop after a token with a newline")  //
      ("stop-on-double-eol", po::bool_switch(&o.stop_on_double_eol),
       "stop once the continuation holds an empty line")  //
      ("output-json", po::value(&o.output_json)->value_name("FILE"),
       "also write the prompts' token ids, generated ids and texts as JSON")  //
      ("recompute", po::bool_switch(&o.recompute),
       "recompute the whole sequence for each token instead of decoding with the KV cache")  //
      ("max-batch", po::value(&o.max_batch)->default_value(8)->value_name("N"),
       "decode up to N prompts together (each prompt's tokens are the same alone)")  //
      ("top-logprobs", po::value(&o.top_logprobs)->default_value(0)->value_name("N"),
       "--output-json also gets each generated token's log-probability and the N most likely");
  return d;
}

// Each prompt's ids, generated ids, text and stop reason, with the tokenizer's end-of-document
// id and vocabulary size (what a reference decode needs besides the checkpoint).
void write_json(const std::string& path, const std::vector<std::string>& prompts,
                const std::vector<Generated>& results, const Tokenizer& tokenizer) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < results.size(); ++i) {
    out.push_back(
        {{"prompt", prompts[i]},
         {"prompt_tokens", results[i].prompt},
         {"tokens", results[i].tokens},
         {"text", results[i].text},
         {"stopped_by", results[i].stopped_by},
         {"eod", tokenizer.eod()},
         {"logprobs", results[i].top_logprobs.empty() || results[i].top_logprobs[0].empty()
                          ? nlohmann::json(nullptr)
                          : nlohmann::json(results[i].logprobs)},
         {"top_logprobs", results[i].top_logprobs},
         {"vocab_size", tokenizer.vocab_size()}});
  }
  std::ofstream file(path);
  file << out.dump(2) << "\n";
  if (!file) throw Error("megatron-app generate: --output-json: cannot write " + path);
}

}  // namespace

int run_generate(MpiRuntime& runtime, const std::vector<std::string>& args) {
  CommonOptions common;
  GenerateOptions o;
  const po::options_description description = describe_options(common, o);
  parse_arguments("generate", args, description, common.help);
  if (common.help) {
    std::cout << description << "\n";
    return 0;
  }
  const std::vector<std::string> prompts = read_prompts(o);
  if (o.max_batch < 1) {
    throw UsageError("megatron-app generate: --max-batch: expected 1 or more, found " +
                     std::to_string(o.max_batch));
  }
  if (o.top_logprobs < 0 || o.top_logprobs > 20) {
    throw UsageError("megatron-app generate: --top-logprobs: expected 0 to 20, found " +
                     std::to_string(o.top_logprobs));
  }
  if (o.tokens_to_generate < 1) {
    throw UsageError("megatron-app generate: --tokens-to-generate: expected 1 or more, found " +
                     std::to_string(o.tokens_to_generate));
  }
  GenerationModel loaded(runtime, common, "generate", o.load, o.recompute);
  if (!loaded.leader()) {
    loaded.follow();
    return 0;
  }
  const Tokenizer& tokenizer = loaded.tokenizer();
  const std::string error = inference::sampling_error(o.sampling, loaded.vocab_size());
  if (!error.empty()) throw UsageError("megatron-app generate: " + error);
  const std::vector<Generated> results =
      generate_all(loaded.decoder(), tokenizer, prompts, o, loaded.log());
  for (std::size_t i = 0; i < prompts.size(); ++i)
    std::cout << prompts[i] << results[i].text << "\n";
  if (!o.output_json.empty()) write_json(o.output_json, prompts, results, tokenizer);
  return 0;
}

}  // namespace megatron::app
