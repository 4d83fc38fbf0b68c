// Retro's encoder cross-attention as a block kind (Megatron-core's RetroEncoderCrossAttention,
// whose bias-dropout-add adds to the normed input: BlockSpec::residual_from_norm): every
// neighbour's retrieved tokens, columns (b l + c) k + j of the encoder's (r, B l k, h) hidden
// states, attend to the decoder chunk they were retrieved for, column b l + c of the chunk
// context (m, B l, h). So it is one CrossAttention over a batch of B l k columns whose memory is
// each chunk's context repeated for its k neighbours.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megatron/nn/block.h"
#include "megatron/nn/cross_attention.h"

namespace megatron::retro {

// The named layer input the encoder's cross-attention reads: the decoder's chunks (m, B l, h),
// Megatron's chunked_output of the first Retro decoder layer. Its gradient is added when asked.
inline constexpr const char* kChunkContext = "retro_chunk_context";

class EncoderCrossAttention : public nn::Mixer {
 public:
  explicit EncoderCrossAttention(std::int64_t num_neighbors) : neighbors_(num_neighbors) {}

  std::uint64_t dropout_sites() const override { return 1; }
  std::vector<std::string> gradient_inputs() const override { return {kChunkContext}; }
  // `<prefix>.attn.linear_q`, `.linear_kv`, `.linear_proj`. Throws Error for a factory with
  // sequence parallelism: the retrieval encoder runs on whole neighbours (its layers are declared
  // with plain tensor parallelism).
  void declare(nn::ParamFactory& factory, const std::string& prefix,
               const nn::TransformerConfig& config) override;
  std::unique_ptr<Saved> forward(const nn::LayerContext& ctx, const Tensor& x,
                                 const nn::LayerInputs& inputs, std::uint64_t first_site,
                                 Tensor& y) const override;
  void backward(const nn::LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const nn::LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                Tensor& dx) const override;

  nn::CrossAttention attention;

 private:
  struct Run;
  std::int64_t neighbors_;
};

// cross_attention behind pre_cross_attn_layernorm, its output added to the normed input.
nn::BlockSpec encoder_cross_attention_block(std::int64_t num_neighbors);

}  // namespace megatron::retro
