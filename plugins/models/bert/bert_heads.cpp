// BERT's post-process: the LM head (the core's TransformLmHead, Megatron's BertLMHead) with the
// masked-LM loss and the pooler with the sentence-order (binary) head, as pretrain_bert's
// loss_func computes them; or a fine-tuning task head (the core's TaskHeadLayer).
#include "bert_model.h"

namespace megatron::bert {

struct BertModel::PostState : nn::LayerStackModel::ProcessState {
  nn::TransformLmHead::Run lm;
  nn::PooledHeadRun pooled;  // the sentence-order head's, or the task head's
  bool pooled_here = false;  // this rank holds the [CLS] token (context-parallel rank 0)
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
  // Under context parallelism the micro-batch's mean is the group's sum over the group's count,
  // counted once (by context-parallel rank 0) when the ranks' terms are summed.
  const double count = nn::context_parallel_sum(ctx.backend, ctx.context, lm.token_count);
  const double counted = ctx.context.rank == 0 ? 1 : 0;
  result.losses.push_back({"lm loss", count > 0 ? lm.loss_sum / count : 0.0, counted});
  if (binary_head_) {
    // The pooler reads the [CLS] token, which only context-parallel rank 0 holds; its gradient
    // there is scaled by the group's size since gradients are averaged over data x context.
    st->pooled_here = ctx.context.rank == 0;
    double sop = 0;
    if (st->pooled_here) {
      StepOptions pooled_options = options;
      pooled_options.loss_scale *= static_cast<float>(ctx.context.size);
      sop = st->pooled.forward(ctx, tp(), pooler_, normed, batch.size(), binary_head_layer_, 2,
                               batch["is_random"], 0.0f, 0, pooled_options);
    }
    result.losses.push_back({"sop loss", sop, counted});
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
  if (binary_head_ && st->pooled_here) {
    st->pooled.backward(ctx, tp(), pooler_, binary_head_layer_, dnormed);
  }
  return dnormed;
}

}  // namespace megatron::bert
