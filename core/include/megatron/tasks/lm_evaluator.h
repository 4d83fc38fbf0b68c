// Zero-shot language-model evaluation shared by the WIKITEXT103 and LAMBADA tasks (Megatron's
// tasks/zeroshot_gpt/evaluate.py): the [model] built for this rank at the configured layout,
// loaded from a pretrained checkpoint, and run forward-only over token windows, each replica
// taking its share of the micro-batches.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "megatron/model.h"
#include "megatron/plugin.h"
#include "megatron/task.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::tasks {

// One evaluation window: seq_length + 1 tokens (inputs are the first seq_length, labels the
// last), and which of the seq_length targets count.
struct LmSample {
  std::vector<TokenId> tokens;
  std::vector<std::uint8_t> loss_mask;
};

// Sums over every sample of every data-parallel replica.
struct LmTotals {
  double loss_sum = 0;       // sum of the counted targets' cross-entropy
  std::int64_t correct = 0;  // samples whose every counted target is the argmax prediction
  std::int64_t samples = 0;  // samples evaluated
  std::int64_t targets = 0;  // counted targets
};

class LmEvaluator {
 public:
  // Creates the [model] plugin, checks that it reads tokens/labels/loss_mask and builds it for
  // this rank (vocabulary of `tokenizer`, `seq_length` positions), then loads `checkpoint` (any
  // layout; its [model] type must be this one).
  LmEvaluator(PluginContext& context, TaskHost& host, const std::string& task_name,
              const Tokenizer& tokenizer, std::int64_t seq_length,
              const std::filesystem::path& checkpoint);
  ~LmEvaluator();

  // Collective over the world. Micro-batches of [training] micro_batch_size samples (the last
  // padded with masked EOD windows) are dealt to the data-parallel replicas in turn;
  // `accuracy` also asks the model for its predictions (Megatron's eval_metric "accuracy").
  LmTotals evaluate(const std::vector<LmSample>& samples, bool accuracy);

  std::int64_t seq_length() const { return seq_length_; }

 private:
  PluginContext& context_;
  std::string task_name_;
  TokenId eod_;
  std::int64_t seq_length_;
  std::unique_ptr<Model> model_;
};

}  // namespace megatron::tasks
