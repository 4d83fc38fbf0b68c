// Language-model embedding forward and backward, vocabulary-parallel under tensor parallelism.
#include "megatron/nn/embedding.h"

#include <vector>

namespace megatron::nn {

void Embedding::declare(ParamFactory& factory, const std::string& prefix, std::int64_t vocab_size,
                        std::int64_t hidden, std::int64_t max_positions, float init_std,
                        float dropout, std::int64_t num_tokentypes) {
  dropout_ = dropout;
  tp_ = factory.tp;
  position_embeddings = tokentype_embeddings = nullptr;
  word_embeddings = &factory.declare(prefix + ".word_embeddings.weight", {vocab_size, hidden},
                                     ParamInit::normal, init_std, true, Split{0, 1});
  word_embeddings->narrowable = true;  // looked up (widen_rows) or read by the output GEMM
  if (max_positions > 0) {
    position_embeddings = &factory.declare(prefix + ".position_embeddings.weight",
                                           {max_positions, hidden}, ParamInit::normal, init_std);
    // Under sequence parallelism positions are added to the sequence shard only, so each rank's
    // gradient is a partial sum (reduced over the group like the norms').
    position_embeddings->sequence_parallel = factory.tp.sp();
  }
  if (num_tokentypes > 0) {
    tokentype_embeddings = &factory.declare(prefix + ".tokentype_embeddings.weight",
                                            {num_tokentypes, hidden}, ParamInit::normal, init_std);
    tokentype_embeddings->sequence_parallel = factory.tp.sp();
  }
}

std::int64_t Embedding::vocab_start() const {
  return shard_runs(*word_embeddings).front().global_offset;
}

Tensor Embedding::positions(Backend& be, const Tensor& ids, std::int64_t first_row,
                            std::int64_t rows) const {
  const std::int64_t s = ids.size(0), b = ids.size(1);
  if (s > position_embeddings->value.size(0)) {
    throw Error("sequence length " + std::to_string(s) + " exceeds max_position_embeddings " +
                std::to_string(position_embeddings->value.size(0)));
  }
  std::vector<std::int32_t> pos(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i)
    pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((first_row + i) / b);
  // Built on the host; the embedding op reads ids on its own device.
  Tensor out = be.empty({rows}, DType::i32);
  be.copy(Tensor::from(pos, {rows}), out);
  return out;
}

Tensor Embedding::local_rows_of(const Tensor& per_row, std::int64_t first,
                                std::int64_t rows) const {
  return per_row.view({per_row.numel()}).slice(0, first, rows);
}

Tensor Embedding::local_positions(Backend& be, const Tensor& ids, const Tensor* position_ids,
                                  std::int64_t local_rows) const {
  const std::int64_t first = tp_.sp() ? tp_.rank * local_rows : 0;
  if (position_ids) return local_rows_of(*position_ids, first, local_rows);
  return positions(be, ids, first, local_rows);
}

void Embedding::lookup_words(Backend& be, const Tensor& ids, Tensor& out) const {
  const Tensor& table = word_embeddings->value;
  if (table.dtype() == out.dtype()) {
    be.embedding_forward(ids, table, vocab_start(), out);
    return;
  }
  // A table held narrower than the activations (bf16 for generation): the rows, then widened.
  Tensor narrow = be.empty(out.shape(), table.dtype());
  be.embedding_forward(ids, table, vocab_start(), narrow);
  be.cast(narrow, out);
}

void Embedding::forward(const LayerContext& ctx, const Tensor& ids, std::uint64_t dropout_site,
                        Tensor& y, const Tensor* types, const Tensor* position_ids) const {
  Backend& be = ctx.backend;
  const std::int64_t rows = ids.numel(), h = word_embeddings->value.size(1);
  const std::int64_t local_rows = y.numel() / h;  // rows / tp under sequence parallelism
  Tensor y_rows = y.view({local_rows, h});
  if (tp_.sp()) {
    Tensor partial = be.empty({rows, h}, y.dtype());
    lookup_words(be, ids.view({rows}), partial);
    tp_reduce_scatter_rows(tp_, partial, y_rows);
  } else {
    lookup_words(be, ids.view({rows}), y_rows);
    tp_all_reduce(tp_, y_rows);
  }
  if (position_embeddings) {
    Tensor pos = be.empty({local_rows, h}, y.dtype());
    be.embedding_forward(local_positions(be, ids, position_ids, local_rows),
                         position_embeddings->value, 0, pos);
    be.add(y_rows, pos, y_rows);
  }
  if (tokentype_embeddings) {
    if (!types) throw Error("embedding with token types: no token types were given");
    Tensor typ = be.empty({local_rows, h}, y.dtype());
    const std::int64_t first = tp_.sp() ? tp_.rank * local_rows : 0;
    be.embedding_forward(local_rows_of(*types, first, local_rows), tokentype_embeddings->value, 0,
                         typ);
    be.add(y_rows, typ, y_rows);
  }
  const float p = ctx.training ? dropout_ : 0.0f;
  if (p > 0) {
    be.dropout_forward(y, p, ctx.seed,
                       ctx.dropout_offset(dropout_site) + tp_sequence_offset(tp_, y.numel()), y);
  }
}

void Embedding::backward(const LayerContext& ctx, const Tensor& ids, std::uint64_t dropout_site,
                         const Tensor& dy, const Tensor* types, const Tensor* position_ids) const {
  Backend& be = ctx.backend;
  const std::int64_t rows = ids.numel(), h = word_embeddings->value.size(1);
  const std::int64_t local_rows = dy.numel() / h;
  Tensor d = dy.view({local_rows, h});
  const float p = ctx.training ? dropout_ : 0.0f;
  if (p > 0) {
    d = be.empty({local_rows, h}, dy.dtype());
    be.dropout_backward(dy.view({local_rows, h}), p, ctx.seed,
                        ctx.dropout_offset(dropout_site) + tp_sequence_offset(tp_, dy.numel()), d);
  }
  if (position_embeddings) {
    be.embedding_backward(local_positions(be, ids, position_ids, local_rows), d, 0,
                          position_embeddings->grad, true);
  }
  if (tokentype_embeddings) {
    const std::int64_t first = tp_.sp() ? tp_.rank * local_rows : 0;
    be.embedding_backward(local_rows_of(*types, first, local_rows), d, 0,
                          tokentype_embeddings->grad, true);
  }
  // Backward of the all-reduce is the identity; of the reduce-scatter, an all-gather.
  if (tp_.sp()) {
    Tensor full = be.empty({rows, h}, dy.dtype());
    tp_gather_rows(tp_, d, full);
    d = full;
  }
  be.embedding_backward(ids.view({rows}), d, vocab_start(), word_embeddings->grad, true);
}

}  // namespace megatron::nn
