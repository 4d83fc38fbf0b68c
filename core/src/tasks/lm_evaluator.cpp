// Zero-shot language-model evaluation over the forward runner (megatron/tasks/lm_evaluator.h).
#include "megatron/tasks/lm_evaluator.h"

#include <cmath>

#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/train/forward_runner.h"
#include "megatron/train/model_setup.h"
#include "megatron/train/pretrained.h"

namespace megatron::tasks {

namespace {

SampleSpec lm_fields(std::int64_t seq_length) {
  return {{"tokens", DType::i32, {seq_length}, FieldKind::token_ids},
          {"labels", DType::i32, {seq_length}, FieldKind::labels},
          {"loss_mask", DType::f32, {seq_length}, FieldKind::mask}};
}

}  // namespace

LmEvaluator::LmEvaluator(PluginContext& context, TaskHost& host, const std::string& task_name,
                         const Tokenizer& tokenizer, std::int64_t seq_length,
                         const std::filesystem::path& checkpoint)
    : context_(context), task_name_(task_name), eod_(tokenizer.eod()), seq_length_(seq_length) {
  model_ = host.create_model();
  const SampleSpec fields = lm_fields(seq_length);
  check_sample_fields(model_->input_fields(), host.model_type(), fields, task_name);
  model_->build(train::model_build_info(context.parallel, context.core, *model_,
                                        static_cast<std::int64_t>(tokenizer.vocab_size()),
                                        seq_length, fields));
  context.log.info("{}", model_->describe());
  train::PretrainedRules rules;
  rules.model_type = host.model_type();
  const train::PretrainedReport report =
      train::load_pretrained(checkpoint, *model_, context.parallel, rules, context.log);
  context.log.info("{}: evaluating {} (iteration {})", task_name, report.file.string(),
                   report.iteration);
}

LmEvaluator::~LmEvaluator() = default;

LmTotals LmEvaluator::evaluate(const std::vector<LmSample>& samples, bool accuracy) {
  ParallelState& parallel = context_.parallel;
  const std::int64_t mbs = context_.core.training.micro_batch_size;
  const std::int64_t dp = parallel.dp_size(), dp_rank = parallel.dp_rank();
  const auto n = static_cast<std::int64_t>(samples.size());
  const std::int64_t micro_batches = (n + mbs - 1) / mbs;
  const SampleSpec fields = lm_fields(seq_length_);
  const auto seq = static_cast<std::size_t>(seq_length_);

  // This replica's micro-batches: k = dp_rank, dp_rank + dp, ... Every sample is evaluated once
  // whatever the data-parallel size (Megatron's DistributedSampler would repeat samples to even
  // out the ranks, counting some twice).
  std::vector<Batch> batches;
  std::vector<std::int64_t> first_sample;
  for (std::int64_t k = dp_rank; k < micro_batches; k += dp) {
    Batch batch = Batch::allocate(fields, mbs);
    for (std::int64_t i = 0; i < mbs; ++i) {
      const std::int64_t index = k * mbs + i;
      const SampleSlots slots = batch.sample(i);
      auto tokens = slots.i32("tokens"), labels = slots.i32("labels");
      auto mask = slots.get<float>("loss_mask");
      if (index >= n) {  // padding of the last micro-batch: EOD windows that count nothing
        std::fill(tokens.begin(), tokens.end(), eod_);
        std::fill(labels.begin(), labels.end(), eod_);
        std::fill(mask.begin(), mask.end(), 0.0f);
        continue;
      }
      const LmSample& s = samples[static_cast<std::size_t>(index)];
      if (s.tokens.size() != seq + 1 || s.loss_mask.size() != seq) {
        throw Error(task_name_ + ": sample " + std::to_string(index) + " has " +
                    std::to_string(s.tokens.size()) + " tokens and " +
                    std::to_string(s.loss_mask.size()) + " mask values; expected " +
                    std::to_string(seq + 1) + " and " + std::to_string(seq));
      }
      for (std::size_t j = 0; j < seq; ++j) {
        tokens[j] = s.tokens[j];
        labels[j] = s.tokens[j + 1];
        mask[j] = s.loss_mask[j];
      }
    }
    batches.push_back(std::move(batch));
    first_sample.push_back(k * mbs);
  }

  train::ForwardRunner runner(*model_, parallel, context_.core);
  const StepResult result = runner.run(batches, accuracy);
  LmTotals totals;
  if (const LossTerm* lm = result.find("lm loss")) {
    totals.loss_sum = lm->sum;
    totals.targets = static_cast<std::int64_t>(std::llround(lm->count));
  } else if (!batches.empty()) {
    throw Error(task_name_ +
                ": the model reported no 'lm loss'; it cannot be evaluated as a "
                "language model");
  }
  if (accuracy && !batches.empty()) {
    const Tensor& argmax = named_tensor(result.outputs, "token_argmax", "the model's outputs");
    const std::vector<std::int64_t> predicted = argmax.to_vector<std::int64_t>();
    for (std::size_t b = 0; b < batches.size(); ++b) {
      for (std::int64_t i = 0; i < mbs; ++i) {
        const std::int64_t index = first_sample[b] + i;
        if (index >= n) continue;
        const LmSample& s = samples[static_cast<std::size_t>(index)];
        bool all_right = true;  // Megatron: positions outside the mask count as right
        const std::size_t row =
            (b * static_cast<std::size_t>(mbs) + static_cast<std::size_t>(i)) * seq;
        for (std::size_t j = 0; j < seq; ++j) {
          if (s.loss_mask[j] && predicted[row + j] != s.tokens[j + 1]) all_right = false;
        }
        totals.correct += all_right;
      }
    }
  }
  for (std::size_t b = 0; b < batches.size(); ++b)
    totals.samples += std::min(mbs, n - first_sample[b]);

  // Sum over the data-parallel replicas (each holds its micro-batches' figures on every rank).
  std::vector<double> sums = {totals.loss_sum, static_cast<double>(totals.correct),
                              static_cast<double>(totals.samples),
                              static_cast<double>(totals.targets)};
  parallel.comm(Group::data).all_reduce(std::span<double>(sums), ReduceOp::sum);
  totals.loss_sum = sums[0];
  totals.correct = static_cast<std::int64_t>(std::llround(sums[1]));
  totals.samples = static_cast<std::int64_t>(std::llround(sums[2]));
  totals.targets = static_cast<std::int64_t>(std::llround(sums[3]));
  return totals;
}

}  // namespace megatron::tasks
