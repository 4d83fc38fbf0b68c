// T5's bucketed relative position bias (Megatron-core's RelativePositionEmbedding): a learned
// (num_buckets, heads) table; bias[h, i, j] = table[bucket(j - i), h] is added to the scaled
// scores of every self-attention layer of one stack (AttentionParams::bias).
#pragma once

#include <cstdint>
#include <string>

#include "megatron/nn/init.h"
#include "megatron/nn/layer_context.h"

namespace megatron::nn {

// The bucket of relative position `relative` (key position - query position) exactly as
// Megatron-core's _relative_position_bucket (HuggingFace T5's): bidirectional stacks give half the
// buckets to keys after the query; in each half, distances below half of its buckets have a
// bucket each and longer ones share logarithmically wider buckets up to max_distance (computed in
// float32 like the PyTorch original); a causal stack puts every key after the query in bucket 0.
std::int64_t relative_position_bucket(std::int64_t relative, bool bidirectional,
                                      std::int64_t num_buckets, std::int64_t max_distance);

class RelativePositionBias {
 public:
  // `prefix` + ".relative_attention_bias.weight" (num_buckets, heads), replicated on every
  // tensor-parallel rank, normal(0, init_std) as Megatron's init_method; `bidirectional` for an
  // encoder, causal for a decoder.
  void declare(ParamFactory& factory, const std::string& prefix, std::int64_t heads,
               bool bidirectional, std::int64_t num_buckets, std::int64_t max_distance,
               float init_std);
  // bias (this rank's heads, sq, sk) in the table's dtype on the backend's device: under tensor
  // parallelism rank r takes heads [r H / tp, (r + 1) H / tp) (Megatron scatters the bias by
  // heads).
  Tensor forward(const LayerContext& ctx, std::int64_t sq, std::int64_t sk) const;
  // Accumulates the table's gradient from dbias (shaped as forward's result; the sum over the
  // layers that used the bias). Each rank contributes its heads and the partial gradients are
  // all-reduced over the tensor-parallel group, so every rank holds the whole, identical gradient
  // (Megatron's gather of the scattered bias in backward).
  void backward(const LayerContext& ctx, const Tensor& dbias) const;

  Parameter* table = nullptr;

 private:
  // (sq * sk) i32 bucket ids on the backend's device, row i * sk + j for query i, key j.
  Tensor buckets(Backend& backend, std::int64_t sq, std::int64_t sk) const;
  bool bidirectional_ = true;
  std::int64_t num_buckets_ = 32, max_distance_ = 128, heads_ = 0;
  TensorParallelism tp_;
};

}  // namespace megatron::nn
