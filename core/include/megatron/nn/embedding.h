// Megatron's language-model embedding: word embeddings plus optional learned absolute positions,
// then dropout; activations come out in (S, B, h).
#pragma once

#include <string>

#include "megatron/nn/init.h"
#include "megatron/nn/layer_context.h"

namespace megatron::nn {

class Embedding {
 public:
  // max_positions = 0: no position embedding table (rotary or none).
  void declare(ParamFactory& factory, const std::string& prefix, std::int64_t vocab_size,
               std::int64_t hidden, std::int64_t max_positions, float init_std, float dropout);
  // ids (S, B) i32 contiguous -> y (S, B, h).
  void forward(const LayerContext& ctx, const Tensor& ids, std::uint64_t dropout_site,
               Tensor& y) const;
  // Accumulates the table gradients from dy (S, B, h).
  void backward(const LayerContext& ctx, const Tensor& ids, std::uint64_t dropout_site,
                const Tensor& dy) const;

  Parameter* word_embeddings = nullptr;      // (V, h)
  Parameter* position_embeddings = nullptr;  // (max_positions, h) or none

 private:
  Tensor positions(const Tensor& ids) const;  // (S * B) i32: row s * B + b -> s
  float dropout_ = 0;
};

}  // namespace megatron::nn
