// Megatron-core's MambaMixer (Mamba-2): in_proj to [z, x, B, C, dt], causal depthwise conv1d +
// SiLU over [x, B, C], the chunked SSD scan, the gated RMSNorm with z, out_proj. Tensor
// parallelism splits heads and groups as Megatron does: in_proj column-parallel by block, conv1d,
// A_log, D, dt_bias and the norm per shard, out_proj row-parallel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megatron/nn/layer_context.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

class MambaMixer {
 public:
  struct Saved {
    Tensor in;         // the mixer's input (rows, h): a sequence shard under SP
    Tensor zxbcdt;     // in_proj's output (S, B, in_proj width / tp)
    Tensor conv;       // conv1d + SiLU over [x, B, C]: (S, B, conv width / tp)
    Tensor y;          // the scan's output (S, B, heads / tp, head_dim)
    Tensor states;     // the state entering each chunk (B, chunks, heads / tp, head_dim, state)
    Tensor norm_rstd;  // (S * B, groups / tp)
    Tensor normed;     // out_proj's input (S * B, d_inner / tp)
  };

  // `prefix` is the mixer's name (decoder.layers.N.mixer). Checks Megatron's divisibility rules
  // (ConfigError naming the key) and declares in Megatron's parameter order.
  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config);
  // x (rows, h), rows = S * B (S / tp under sequence parallelism), row s * B + b; out the same.
  void forward(const LayerContext& ctx, const Tensor& x, std::int64_t batch, Tensor& out,
               Saved& saved) const;
  // dout as out; dx (rows, h) overwritten; parameter gradients accumulated; releases `saved`.
  void backward(const LayerContext& ctx, const Tensor& dout, Saved& saved, Tensor& dx) const;

  // Incremental decoding: what the next tokens need of the earlier ones, as mamba_ssm's
  // inference keeps it: the last conv_kernel - 1 inputs of the conv (B, K - 1, conv width) and
  // the SSM state (B, heads, head_dim, state), both zero before the first token.
  struct DecodeState {
    Tensor conv_window, ssm;
  };
  DecodeState start_decoding(Backend& be, std::int64_t batch, DType dtype) const;
  // x (S_new * B rows, h), row s * B + b, the tokens after those `state` has seen -> out (same);
  // advances the state.
  void forward_decoding(const LayerContext& ctx, const Tensor& x, std::int64_t batch,
                        DecodeState& state, Tensor& out) const;

  Linear in_proj, out_proj;
  Parameter *conv_weight = nullptr, *conv_bias = nullptr;
  Parameter *A_log = nullptr, *D = nullptr, *dt_bias = nullptr, *norm_weight = nullptr;

 private:
  // RMSNormGated's eps in MambaMixer (fixed there, not layernorm_epsilon).
  static constexpr float kNormEps = 1e-5f;
  // The scan's operands as views: conv (B, S, conv width) after conv1d + SiLU, zxbcdt in_proj's
  // output (S, B, width).
  Backend::SsdScan scan_operands(const Tensor& conv, const Tensor& zxbcdt) const;

  TransformerConfig config_;
  TensorParallelism tp_;
  // Per rank (divided by the tensor-parallel size).
  std::int64_t d_inner_ = 0, heads_ = 0, groups_ = 0, state_ = 0, head_dim_ = 0;
  std::int64_t conv_width() const { return d_inner_ + 2 * groups_ * state_; }
  std::int64_t in_proj_width() const { return 2 * d_inner_ + 2 * groups_ * state_ + heads_; }
};

}  // namespace megatron::nn
