// The shape and options of a transformer block stack, in Megatron's argument names.
#pragma once

#include <cstdint>
#include <string>

#include "megatron/backend/backend.h"
#include "megatron/nn/moe/moe_config.h"
#include "megatron/nn/norm.h"

namespace megatron::nn {

struct TransformerConfig {
  std::int64_t num_layers = 2;
  std::int64_t hidden_size = 64;
  std::int64_t num_attention_heads = 4;
  std::int64_t num_query_groups = 4;  // = heads without grouped-query attention
  std::int64_t kv_channels = 16;      // head dimension
  std::int64_t ffn_hidden_size = 256;
  NormKind normalization = NormKind::layernorm;
  float norm_epsilon = 1e-5f;
  bool swiglu = false;  // else GeLU
  GeluApproximation gelu = GeluApproximation::tanh;
  bool add_bias_linear = true;
  bool add_qkv_bias = false;  // a qkv bias even without add_bias_linear
  float attention_dropout = 0.1f;
  float hidden_dropout = 0.1f;
  float init_method_std = 0.02f;
  std::int64_t rotary_dim = 0;  // features of each head rotated; 0 = no rotary embedding

  // The Mamba-2 mixer (Megatron's mamba_* TransformerConfig fields and MambaMixer defaults).
  std::int64_t mamba_state_dim = 128;
  std::int64_t mamba_head_dim = 64;
  std::int64_t mamba_num_groups = 8;
  std::int64_t mamba_num_heads = 0;  // 0: d_inner / mamba_head_dim with d_inner = expand * h
  std::int64_t mamba_expand = 2;
  std::int64_t mamba_conv_kernel = 4;   // d_conv
  std::int64_t mamba_chunk_size = 128;  // the SSD scan's chunk (MambaMixer's chunk_size)

  MoeConfig moe;  // Mixture of Experts (num_experts 0: none)

  std::int64_t heads_per_group() const { return num_attention_heads / num_query_groups; }
  // Width of linear_qkv's output: (np + 2 ng) hn, laid out per query group.
  std::int64_t qkv_size() const {
    return (num_attention_heads + 2 * num_query_groups) * kv_channels;
  }
  // Megatron scales the output projections' init by 1/sqrt(2 L).
  float output_init_std() const;
  std::int64_t mamba_heads() const {
    return mamba_num_heads > 0 ? mamba_num_heads : mamba_expand * hidden_size / mamba_head_dim;
  }
  std::int64_t mamba_d_inner() const { return mamba_heads() * mamba_head_dim; }
};

// Rotary cos/sin tables (S, R) in Megatron's non-interleaved layout: cat(freqs, freqs).
struct RotaryTables {
  Tensor cos, sin;
};
RotaryTables make_rotary_tables(std::int64_t seq_length, std::int64_t rotary_dim, double base,
                                DType dtype);

}  // namespace megatron::nn
