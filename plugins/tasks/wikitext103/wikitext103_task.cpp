// Task plugin `wikitext103`: Megatron's WIKITEXT103 zero-shot evaluation (tasks/zeroshot_gpt):
// perplexity of the [model] over the raw test file, detokenised, BPE-encoded as one stream and cut
// into overlapping windows, printed as Megatron prints it and written as JSON.
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "megatron/error.h"
#include "megatron/task.h"
#include "megatron/tasks/lm_evaluator.h"
#include "megatron/tasks/python_text.h"
#include "megatron/tasks/task_options.h"
#include "wikitext_detokenizer.h"

namespace megatron::wikitext {

namespace {

void declare_config(config::TableSchema& s) {
  s.path_list("valid_data", "the raw WikiText-103 test file (wiki.test.tokens), exactly one")
      .add({"seq_length",
            config::ValueKind::integer,
            config::Presence::required,
            std::int64_t{0},
            config::Range::positive(),
            {},
            "window length in tokens (Megatron's --seq-length)"})
      .integer("overlapping_eval", 32,
               "stride between windows; every window after the first scores only its last "
               "overlapping_eval targets (Megatron's --overlapping-eval)",
               config::Range::positive());
  tasks::declare_task_keys(s, "GPT2BPETokenizer");
}

// Python's repr() of a float, which Megatron's '{}'.format(token_ratio) prints: the shortest
// round-trip digits, with ".0" on whole numbers.
std::string python_float(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

class Wikitext103Task final : public Task {
 public:
  explicit Wikitext103Task(PluginContext& context) : context_(context) {}

  TaskResult run(TaskHost& host) override {
    const config::ConfigTable& t = context_.config;
    const std::string& file = tasks::single_valid_file(t, "WIKITEXT103");
    const std::int64_t seq = t.integer("seq_length"), stride = t.integer("overlapping_eval");
    const auto tokenizer = tasks::task_tokenizer(t);

    std::ifstream in(file, std::ios::binary);
    if (!in) t.fail("valid_data", "cannot open '" + file + "'");
    std::ostringstream raw;
    raw << in.rdbuf();
    const std::string text = raw.str();
    // Megatron: len(text.strip().split(" ")) — pieces between single spaces, empty ones included.
    const std::string_view stripped = tasks::python_strip(text);
    const std::int64_t original_tokens =
        1 + static_cast<std::int64_t>(std::count(stripped.begin(), stripped.end(), ' '));
    std::vector<TokenId> tokens;
    try {
      tokens = tokenizer->encode(wikitext_detokenize(text));
    } catch (const Error& e) {
      throw ConfigError(file + ": " + e.what());
    }
    const auto tokenized = static_cast<std::int64_t>(tokens.size());
    if (tokenized < 2 || original_tokens < 2) {
      throw ConfigError(file + ": " + std::to_string(tokenized) + " tokens (" +
                        std::to_string(original_tokens) +
                        " before detokenising); perplexity needs at least 2");
    }
    context_.log.info("WIKITEXT103: {} original tokens, {} detokenized tokens", original_tokens,
                      tokenized);

    const std::vector<tasks::LmSample> windows =
        make_windows(tokens, seq, stride, tokenizer->eod());
    tasks::LmEvaluator evaluator(context_, host, "WIKITEXT103", *tokenizer, seq,
                                 tasks::task_checkpoint(context_));
    const tasks::LmTotals totals = evaluator.evaluate(windows, false);

    const double avg_loss = totals.loss_sum / static_cast<double>(tokenized - 1);
    const double ppl = std::exp(std::min(20.0, avg_loss));
    const double ratio =
        static_cast<double>(tokenized - 1) / static_cast<double>(original_tokens - 1);
    const double adjusted = std::exp(std::min(20.0, avg_loss * ratio));
    tasks::print_result_box(
        context_,
        fmt::format(" validation results on WIKITEXT103 | avg loss: {:.4E} | ppl: {:.4E} | "
                    "adjusted ppl: {:.4E} | token ratio: {} |",
                    avg_loss, ppl, adjusted, python_float(ratio)));
    tasks::write_task_results(context_, {{"task", std::string("WIKITEXT103")},
                                         {"avg_loss", avg_loss},
                                         {"ppl", ppl},
                                         {"adjusted_ppl", adjusted},
                                         {"token_ratio", ratio},
                                         {"num_original_tokens", original_tokens},
                                         {"num_tokenized_tokens", tokenized},
                                         {"num_windows", static_cast<std::int64_t>(windows.size())},
                                         {"scored_targets", totals.targets}});
    return {{{"avg loss", avg_loss}, {"ppl", ppl}, {"adjusted ppl", adjusted}}};
  }

 private:
  // Megatron's _LMDataset: window i starts at i * stride and holds seq + 1 tokens (the tail padded
  // with EOD, masked); the first window scores every target, later ones only their last `stride`.
  static std::vector<tasks::LmSample> make_windows(const std::vector<TokenId>& tokens,
                                                   std::int64_t seq, std::int64_t stride,
                                                   TokenId eod) {
    const auto n = static_cast<std::int64_t>(tokens.size());
    const std::int64_t targets = std::max<std::int64_t>(n - 1 - stride, 0);
    const std::int64_t count = std::max<std::int64_t>((targets + stride - 1) / stride + 1, 1);
    std::vector<tasks::LmSample> windows(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      tasks::LmSample& w = windows[static_cast<std::size_t>(i)];
      const std::int64_t start = i * stride, end = std::min(n, start + seq + 1);
      w.tokens.assign(tokens.begin() + start, tokens.begin() + end);
      const auto real = static_cast<std::int64_t>(w.tokens.size());
      w.tokens.resize(static_cast<std::size_t>(seq + 1), eod);
      // pad_mask[1:] of [1] * real + [0] * pad: target j counts when token j + 1 is real.
      w.loss_mask.assign(static_cast<std::size_t>(seq), 0);
      for (std::int64_t j = 0; j + 1 < real; ++j)
        w.loss_mask[static_cast<std::size_t>(j)] = 1;
      // pad_mask[:-stride] = 0 after the first window (an empty slice when stride >= seq).
      if (stride != seq && i != 0) {
        for (std::int64_t j = 0; j < seq - stride; ++j)
          w.loss_mask[static_cast<std::size_t>(j)] = 0;
      }
    }
    return windows;
  }

  PluginContext& context_;
};

std::unique_ptr<Plugin> create(PluginContext& context) {
  return std::make_unique<Wikitext103Task>(context);
}

const PluginDescriptor* descriptor() {
  static const PluginDescriptor d = make_plugin_descriptor(
      PluginKind::task, "wikitext103", "1.0.0",
      "WikiText-103 perplexity of a pretrained language model (Megatron's WIKITEXT103)",
      declare_config, create);
  return &d;
}

}  // namespace

}  // namespace megatron::wikitext

MEGATRON_PLUGIN(megatron::wikitext::descriptor)
