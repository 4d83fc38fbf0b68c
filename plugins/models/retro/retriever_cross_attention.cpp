// The first Retro decoder layer's cross-attention: chunk context, the retrieval encoder's layers,
// the encoder output buffer, the chunked cross-attention, and backward in the reverse order.
#include "retriever_cross_attention.h"

#include "device_ids.h"
#include "encoder_cross_attention.h"
#include "megatron/error.h"
#include "megatron/nn/core_blocks.h"
#include "sequence_shards.h"

namespace megatron::retro {

struct RetrieverCrossAttention::Run : nn::Mixer::Saved {
  Tensor context_rows;  // i32 ids of chunk_context_rows
  Tensor context;       // (m, B l, h)
  Tensor output_rows;   // i32 ids of per_chunk_rows
  std::vector<nn::Layer::Saved> encoder;
  std::unique_ptr<nn::Mixer::Saved> cca;
};

RetrieverCrossAttention::RetrieverCrossAttention(ChunkShape shape, EncoderSettings settings)
    : cca(shape), shape_(shape), settings_(settings) {}

nn::LayerSpec RetrieverCrossAttention::encoder_spec(std::int64_t layer) const {
  if (layer == 0) {
    // Megatron's RetroEncoderLayerNorm holds this layer's pre-MLP LayerNorm as `norm`.
    nn::BlockSpec mlp = nn::mlp_block();
    mlp.norm.name = "pre_mlp_layernorm.norm";
    return {{nn::self_attention_block(nn::AttentionMask::padding),
             encoder_cross_attention_block(shape_.num_neighbors), mlp}};
  }
  return {{nn::self_attention_block(nn::AttentionMask::padding), nn::mlp_block()}};
}

std::uint64_t RetrieverCrossAttention::dropout_sites() const {
  std::uint64_t sites = cca.dropout_sites();
  for (std::int64_t l = 0; l < settings_.num_layers; ++l)
    sites += nn::Layer::dropout_sites(encoder_spec(l));
  return sites;
}

void RetrieverCrossAttention::declare(nn::ParamFactory& factory, const std::string& prefix,
                                      const nn::TransformerConfig& config) {
  cca.declare(factory, prefix, config);
  tp_ = factory.tp;
  // The encoder runs on whole neighbours and whole chunk contexts: plain tensor parallelism
  // under sequence parallelism too.
  nn::ParamFactory whole = factory;
  whole.tp.sequence_parallel = false;
  nn::TransformerConfig ec = config;
  ec.num_layers = settings_.num_layers;
  ec.hidden_dropout = settings_.hidden_dropout;
  ec.attention_dropout = settings_.attention_dropout;
  encoder.clear();
  encoder.resize(static_cast<std::size_t>(settings_.num_layers));
  // Sites relative to the encoder's first (site_base at run time).
  std::uint64_t site = 0;
  for (std::int64_t l = 0; l < settings_.num_layers; ++l) {
    const nn::LayerSpec spec = encoder_spec(l);
    encoder[static_cast<std::size_t>(l)].declare(
        whole, prefix + ".encoder.layers." + std::to_string(l), ec, spec, site);
    site += nn::Layer::dropout_sites(spec);
  }
}

std::vector<std::int32_t> RetrieverCrossAttention::chunk_context_rows(std::int64_t seq,
                                                                      std::int64_t batch,
                                                                      std::int64_t m) {
  const std::int64_t l = (seq + m - 1) / m, first = seq % m, columns = batch * l;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(m * columns));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t c = 0; c < l; ++c) {
        std::int64_t s = c * m + i;
        if (first > 0) s = c == 0 ? (i < first ? i : -1) : first + (c - 1) * m + i;
        ids[static_cast<std::size_t>(i * columns + b * l + c)] =
            static_cast<std::int32_t>(s < 0 ? seq * batch : s * batch + b);
      }
    }
  }
  return ids;
}

std::vector<std::int32_t> RetrieverCrossAttention::per_chunk_rows(std::int64_t r,
                                                                  std::int64_t columns,
                                                                  std::int64_t k) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(r * k * columns));
  for (std::int64_t t = 0; t < r; ++t)
    for (std::int64_t j = 0; j < k; ++j)
      for (std::int64_t col = 0; col < columns; ++col)
        ids[static_cast<std::size_t>((t * k + j) * columns + col)] =
            static_cast<std::int32_t>((t * columns + col) * k + j);
  return ids;
}

nn::LayerInputs RetrieverCrossAttention::encoder_inputs(Backend& be, const Tensor& context,
                                                        std::int64_t columns) const {
  nn::LayerInputs in;
  in.set(kChunkContext, context);
  Tensor none = be.empty({columns, shape_.retrieved_length}, DType::u8);
  be.fill(none, 0.0);
  in.set(nn::layer_input::key_padding_mask, none);
  return in;
}

std::unique_ptr<nn::Mixer::Saved> RetrieverCrossAttention::forward(const nn::LayerContext& ctx,
                                                                   const Tensor& x,
                                                                   const nn::LayerInputs& inputs,
                                                                   std::uint64_t first_site,
                                                                   Tensor& y) const {
  Backend& be = ctx.backend;
  const Tensor x_full = gather_sequence(be, tp_, x);
  const std::int64_t seq = x_full.size(0), batch = x.size(1), h = x.size(2);
  const std::int64_t m = shape_.chunk_length, l = (seq + m - 1) / m;
  const std::int64_t r = shape_.retrieved_length, k = shape_.num_neighbors;
  const Tensor& neighbors = inputs.require(kNeighborEmbeddings, "Retro's retrieval encoder");
  if (neighbors.dim() != 3 || neighbors.size(0) != r || neighbors.size(1) != batch * l * k) {
    throw Error("Retro's retrieval encoder: the neighbour embeddings are " +
                shape_str(neighbors.shape()) + ", expected (" + std::to_string(r) + ", " +
                std::to_string(batch * l * k) + ", " + std::to_string(h) + ")");
  }
  Tensor buffer = inputs.require(kEncoderOutput, "Retro's retrieval encoder");
  auto run = std::make_unique<Run>();
  run->context_rows = device_ids(be, chunk_context_rows(seq, batch, m));
  run->context = be.empty({m, batch * l, h}, x.dtype());
  Tensor context_rows = nn::rows_of(run->context);
  be.embedding_forward(run->context_rows, nn::rows_of(x_full), 0, context_rows);

  nn::LayerContext encoder_ctx = ctx;
  encoder_ctx.site_base = ctx.site_base + first_site + cca.dropout_sites();
  const nn::LayerInputs encoder_in = encoder_inputs(be, run->context, batch * l * k);
  run->encoder.resize(encoder.size());
  Tensor hidden = neighbors;
  for (std::size_t i = 0; i < encoder.size(); ++i) {
    Tensor out = be.empty(hidden.shape(), hidden.dtype());
    encoder[i].forward(encoder_ctx, hidden, encoder_in, out, run->encoder[i], true);
    hidden = out;
  }
  if (buffer.shape() != Shape{r * k, batch * l, h}) {
    throw Error("Retro's retrieval encoder: the encoder output buffer is " +
                shape_str(buffer.shape()) + ", expected (" + std::to_string(r * k) + ", " +
                std::to_string(batch * l) + ", " + std::to_string(h) + ")");
  }
  run->output_rows = device_ids(be, per_chunk_rows(r, batch * l, k));
  Tensor buffer_rows = nn::rows_of(buffer);
  be.embedding_forward(run->output_rows, nn::rows_of(hidden), 0, buffer_rows);
  run->cca = cca.forward(ctx, x, inputs, first_site, y);
  return run;
}

void RetrieverCrossAttention::backward(const nn::LayerContext& ctx, const Tensor& x,
                                       const Tensor& dy, const nn::LayerInputs& inputs,
                                       std::uint64_t first_site, Saved& saved, Tensor& dx) const {
  Backend& be = ctx.backend;
  Run& run = static_cast<Run&>(saved);
  const std::int64_t r = shape_.retrieved_length;
  // This layer's share of the encoder output's gradient joins the later layers'.
  cca.backward(ctx, x, dy, inputs, first_site, *run.cca, dx);
  const Tensor doutput = inputs.gradient(kEncoderOutput, "Retro's retrieval encoder backward");
  const std::int64_t columns = doutput.numel() / (r * doutput.size(2));
  // Each encoder row went to one memory row: the scatter back is the gather's gradient.
  Tensor d = be.empty({r, columns, doutput.size(2)}, doutput.dtype());
  Tensor d_rows = nn::rows_of(d);
  be.embedding_backward(run.output_rows, nn::rows_of(doutput), 0, d_rows, false);

  nn::LayerContext encoder_ctx = ctx;
  encoder_ctx.site_base = ctx.site_base + first_site + cca.dropout_sites();
  nn::LayerInputs encoder_in = encoder_inputs(be, run.context, columns);
  Tensor dcontext = be.empty(run.context.shape(), run.context.dtype());
  be.fill(dcontext, 0.0);
  encoder_in.collect_gradient(kChunkContext, dcontext);
  for (std::size_t i = encoder.size(); i-- > 0;) {
    Tensor dprev = be.empty(d.shape(), d.dtype());
    encoder[i].backward(encoder_ctx, d, encoder_in, run.encoder[i], dprev);
    d = dprev;
  }
  Tensor dneighbors = inputs.gradient(kNeighborEmbeddings, "Retro's retrieval encoder backward");
  be.add(dneighbors, d, dneighbors);
  // The chunks were this layer's normed input (the whole sequence's: every rank's gradient is
  // whole, each keeps its shard under sequence parallelism).
  Shape full_shape = x.shape();
  full_shape[0] = nn::tp_full_rows(tp_, x.size(0));
  Tensor dx_context = be.empty(full_shape, x.dtype());
  Tensor dx_context_rows = nn::rows_of(dx_context);
  be.embedding_backward(run.context_rows, nn::rows_of(dcontext), 0, dx_context_rows, false);
  if (tp_.sp()) {
    Tensor own = be.empty(x.shape(), x.dtype());
    copy_own_rows(be, tp_, dx_context, own);
    dx_context = own;
  }
  be.add(dx, dx_context, dx);
}

nn::BlockSpec retriever_cross_attention_block(ChunkShape shape, EncoderSettings encoder) {
  return {"cross_attention",
          {"pre_cross_attn_layernorm", false},
          [shape, encoder] { return std::make_unique<RetrieverCrossAttention>(shape, encoder); },
          {}};
}

}  // namespace megatron::retro
