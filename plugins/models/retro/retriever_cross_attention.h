// The first Retro decoder layer's cross-attention (Megatron-core's RetroDecoderCrossAttention
// with its encoder block): the retrieval encoder runs here, on the neighbours' embeddings with the
// decoder's chunks as its cross-attention context, because those chunks are this layer's normed
// hidden states. Its output fills the model's `retro_encoder_output` buffer, which this layer's
// chunked cross-attention and every later Retro layer's read; in backward the buffer's gradient,
// complete once the later layers' backward has added theirs, flows back through the encoder to
// the neighbours' embeddings and, through the chunks, to this layer's input.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chunked_cross_attention.h"
#include "megatron/nn/layer.h"

namespace megatron::retro {

// The named layer input of the neighbours' token embeddings (r, B l k, h): column
// (b l + c) k + j holds neighbour j of chunk c of sample b (Megatron's context, the word and
// position embeddings of neighbor_tokens viewed (B l k, r)). Its gradient is added when asked.
inline constexpr const char* kNeighborEmbeddings = "retro_neighbor_embeddings";

// The retrieval encoder's own settings (retro_encoder_num_layers, retro_encoder_hidden_dropout,
// retro_encoder_attention_dropout).
struct EncoderSettings {
  std::int64_t num_layers = 2;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
};

class RetrieverCrossAttention : public nn::Mixer {
 public:
  RetrieverCrossAttention(ChunkShape shape, EncoderSettings settings);

  // The chunked cross-attention's site, then the encoder layers' (through site_base).
  std::uint64_t dropout_sites() const override;
  std::vector<std::string> gradient_inputs() const override {
    return {kEncoderOutput, kNeighborEmbeddings};
  }
  // `<prefix>.attn.*` (the chunked cross-attention), then the encoder's layers
  // `<prefix>.encoder.layers.N.*`: Megatron's module order.
  void declare(nn::ParamFactory& factory, const std::string& prefix,
               const nn::TransformerConfig& config) override;
  std::unique_ptr<Saved> forward(const nn::LayerContext& ctx, const Tensor& x,
                                 const nn::LayerInputs& inputs, std::uint64_t first_site,
                                 Tensor& y) const override;
  void backward(const nn::LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const nn::LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                Tensor& dx) const override;

  // Megatron's chunked_output as rows of x's (S * B) rows, i32, an id past the end a zero row:
  // row (i, b l + c) of the (m, B l) chunk context. With S % m != 0 the first chunk holds the
  // first S % m tokens then zeros, and chunk c >= 1 the m tokens after those; else chunk c is
  // tokens c m ... c m + m - 1.
  static std::vector<std::int32_t> chunk_context_rows(std::int64_t seq, std::int64_t batch,
                                                      std::int64_t chunk_length);
  // The encoder output (r, B l k, h), column (b l + c) k + j, as the chunked cross-attention's
  // memory (r k, B l, h): row (t k + j) B l + col of the memory is row t B l k + col k + j of the
  // output, so column b l + c holds exactly chunk c's k neighbours. Megatron gets the same memory
  // from its reshape because RetroEncoderBiasDropoutAdd stacks the encoder's columns
  // neighbour-major (j B l + b l + c); ours stay neighbour-fastest, hence this gather.
  static std::vector<std::int32_t> per_chunk_rows(std::int64_t retrieved, std::int64_t columns,
                                                  std::int64_t neighbors);

  ChunkedCrossAttention cca;
  std::vector<nn::Layer> encoder;

 private:
  struct Run;
  // Encoder layer 0: self-attention, the encoder cross-attention, the MLP; later ones: a GPT
  // layer. Self-attention over all r tokens (Megatron's all-true mask), no rotary positions.
  nn::LayerSpec encoder_spec(std::int64_t layer) const;
  // The layers' inputs: the chunk context and a key padding mask of zeros.
  nn::LayerInputs encoder_inputs(Backend& backend, const Tensor& context,
                                 std::int64_t columns) const;
  ChunkShape shape_;
  EncoderSettings settings_;
  nn::TensorParallelism tp_;  // the layer's, for the sequence shards
};

// cross_attention behind pre_cross_attn_layernorm, with the retrieval encoder.
nn::BlockSpec retriever_cross_attention_block(ChunkShape shape, EncoderSettings encoder);

}  // namespace megatron::retro
