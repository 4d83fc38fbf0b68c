// BERT's post-process: the LM head (the core's TransformLmHead, Megatron's BertLMHead) with the
// masked-LM loss and the pooler with the sentence-order (binary) head, as pretrain_bert's
// loss_func computes them; or a fine-tuning task head (the core's TaskHeadLayer).
#include "bert_model.h"

namespace megatron::bert {

struct BertModel::PostState : nn::LayerStackModel::ProcessState {
  nn::TransformLmHead::Run lm;
  nn::PooledHeadRun pooled;  // the sentence-order head's, or the task head's
};

StepResult BertModel::post_forward(const nn::LayerContext& ctx, const Batch& batch,
                                   const Tensor& normed, const StepOptions& options,
                                   std::unique_ptr<ProcessState>& state) {
  auto st = std::make_unique<PostState>();
  StepResult result;
  if (head_.kind != TaskHead::Kind::pretraining) {
    result = task_head_.forward(ctx, tp(), batch, normed, post_process_dropout_site(), options,
                                st->pooled);
    state = std::move(st);
    return result;
  }
  // pretrain_bert's loss_func: per-micro-batch means (the lm loss: the masked mean), averaged
  // over micro-batches and data-parallel ranks when reported (count 1 each); the objective is
  // their sum.
  Parameter& weight = output_copy_ ? *output_copy_ : *embedding_.word_embeddings;
  const nn::LmLossResult lm =
      lm_head_.forward(ctx, batch, normed, weight, output_bias_, options, tp(), st->lm);
  result.losses.push_back({"lm loss", lm.token_count > 0 ? lm.loss_sum / lm.token_count : 0.0, 1});
  if (binary_head_) {
    result.losses.push_back(
        {"sop loss",
         st->pooled.forward(ctx, tp(), pooler_, normed, batch.size(), binary_head_layer_, 2,
                            batch["is_random"], 0.0f, 0, options),
         1});
  }
  state = std::move(st);
  return result;
}

Tensor BertModel::post_backward(const nn::LayerContext& ctx, ProcessState* state) {
  auto* st = static_cast<PostState*>(state);
  if (head_.kind != TaskHead::Kind::pretraining) {
    return task_head_.backward(ctx, tp(), st->pooled);
  }
  Tensor dnormed = lm_head_.backward(ctx, st->lm);
  if (binary_head_) st->pooled.backward(ctx, tp(), pooler_, binary_head_layer_, dnormed);
  return dnormed;
}

}  // namespace megatron::bert
