// Retro's chunked cross-attention as a block kind (Megatron-core's RetroDecoderCrossAttention
// without its encoder, with RetroDecoderBiasDropoutAdd's reshaping): the decoder's normed hidden
// states from position pad = (S - 1) % m on, cut into l = ceil(S / m) chunks of m tokens (the last
// zero-padded), each attend to the encoded neighbours of their chunk; the outputs go back to the
// positions they came from, and positions before pad get none (zero, no bias). So the neighbours
// retrieved for chunk c reach the sequence at that chunk's last token, the causality shift of
// m - 1. The layer's hidden dropout and residual add follow as for any block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megatron/nn/block.h"
#include "megatron/nn/cross_attention.h"
#include "megatron/nn/tensor_parallel.h"

namespace megatron::retro {

// The named layer input chunked cross-attention reads: the retrieval encoder's output
// (r * k, B * l, h) in the layers' dtype (r retrieved tokens per neighbour, k neighbours, the
// batch's l chunks per sample, batch-major: column b * l + c). Its gradient is added when asked.
inline constexpr const char* kEncoderOutput = "retro_encoder_output";

struct ChunkShape {
  std::int64_t chunk_length = 64;       // m: retro_chunk_length
  std::int64_t num_neighbors = 2;       // k: retro_num_neighbors
  std::int64_t retrieved_length = 128;  // r: retro_num_retrieved_chunks x chunk_length
};

class ChunkedCrossAttention : public nn::Mixer {
 public:
  explicit ChunkedCrossAttention(ChunkShape shape) : shape_(shape) {}

  std::uint64_t dropout_sites() const override { return 1; }
  std::vector<std::string> gradient_inputs() const override { return {kEncoderOutput}; }
  // `<prefix>.attn.linear_q`, `.linear_kv`, `.linear_proj` (BaseRetroCrossAttention holds
  // Megatron's CrossAttention as `attn`). Under sequence parallelism x and y are sequence shards:
  // x is gathered, the attention runs as plain tensor parallelism on the whole sequence, and each
  // rank keeps its shard of the output (and, in backward, of the input gradient).
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
  // Row maps for a micro-batch of S x B tokens (i32 on the device; an id past the end is a zero
  // row): the chunked queries' rows in x's (S * B) rows, and y's rows in the attention output's
  // (m * B * l) rows.
  struct Layout {
    std::int64_t chunks = 0, pad = 0;
    Tensor query_rows, output_rows;
  };
  Layout layout(Backend& backend, std::int64_t seq, std::int64_t batch) const;
  ChunkShape shape_;
  nn::TensorParallelism tp_;  // the layer's, for the sequence shards
};

// cross_attention behind pre_cross_attn_layernorm, as Megatron's Retro decoder layer names them.
nn::BlockSpec chunked_cross_attention_block(ChunkShape shape);

}  // namespace megatron::retro
