// Language-model embedding forward and backward.
#include "megatron/nn/embedding.h"

#include <vector>

namespace megatron::nn {

void Embedding::declare(ParamFactory& factory, const std::string& prefix, std::int64_t vocab_size,
                        std::int64_t hidden, std::int64_t max_positions, float init_std,
                        float dropout) {
  dropout_ = dropout;
  word_embeddings = &factory.declare(prefix + ".word_embeddings.weight", {vocab_size, hidden},
                                     ParamInit::normal, init_std);
  word_embeddings->partition_dim = 0;  // vocabulary-parallel
  if (max_positions > 0) {
    position_embeddings = &factory.declare(prefix + ".position_embeddings.weight",
                                           {max_positions, hidden}, ParamInit::normal, init_std);
  }
}

Tensor Embedding::positions(const Tensor& ids) const {
  const std::int64_t s = ids.size(0), b = ids.size(1);
  if (s > position_embeddings->value.size(0)) {
    throw Error("sequence length " + std::to_string(s) + " exceeds max_position_embeddings " +
                std::to_string(position_embeddings->value.size(0)));
  }
  std::vector<std::int32_t> pos(static_cast<std::size_t>(s * b));
  for (std::int64_t i = 0; i < s * b; ++i)
    pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i / b);
  return Tensor::from(pos, {s * b});
}

void Embedding::forward(const LayerContext& ctx, const Tensor& ids, std::uint64_t dropout_site,
                        Tensor& y) const {
  Backend& be = ctx.backend;
  const std::int64_t rows = ids.numel(), h = word_embeddings->value.size(1);
  Tensor y_rows = y.view({rows, h});
  be.embedding_forward(ids.view({rows}), word_embeddings->value, 0, y_rows);
  if (position_embeddings) {
    Tensor pos = be.empty({rows, h}, y.dtype());
    be.embedding_forward(positions(ids), position_embeddings->value, 0, pos);
    be.add(y_rows, pos, y_rows);
  }
  const float p = ctx.training ? dropout_ : 0.0f;
  if (p > 0) be.dropout_forward(y, p, ctx.seed, ctx.dropout_offset(dropout_site), y);
}

void Embedding::backward(const LayerContext& ctx, const Tensor& ids, std::uint64_t dropout_site,
                         const Tensor& dy) const {
  Backend& be = ctx.backend;
  const std::int64_t rows = ids.numel(), h = word_embeddings->value.size(1);
  Tensor d = dy.view({rows, h});
  const float p = ctx.training ? dropout_ : 0.0f;
  if (p > 0) {
    d = be.empty({rows, h}, dy.dtype());
    be.dropout_backward(dy.view({rows, h}), p, ctx.seed, ctx.dropout_offset(dropout_site), d);
  }
  be.embedding_backward(ids.view({rows}), d, 0, word_embeddings->grad, true);
  if (position_embeddings)
    be.embedding_backward(positions(ids), d, 0, position_embeddings->grad, true);
}

}  // namespace megatron::nn
