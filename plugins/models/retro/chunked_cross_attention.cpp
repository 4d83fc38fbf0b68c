// Retro's chunked cross-attention: the chunk layout as row gathers around Megatron's
// CrossAttention, and the adjoint scatters in backward.
#include "chunked_cross_attention.h"

#include "device_ids.h"
#include "megatron/error.h"
#include "sequence_shards.h"

namespace megatron::retro {

struct ChunkedCrossAttention::Run : nn::Mixer::Saved {
  Layout layout;
  Tensor queries;  // (m, B * l, h): the attention's x
  nn::CrossAttention::Saved attention;
};

void ChunkedCrossAttention::declare(nn::ParamFactory& factory, const std::string& prefix,
                                    const nn::TransformerConfig& config) {
  tp_ = factory.tp;
  // Chunks cut across the sequence shards: under sequence parallelism the attention runs as plain
  // tensor parallelism on the gathered sequence, its output reduced whole on every rank.
  nn::ParamFactory whole = factory;
  whole.tp.sequence_parallel = false;
  attention.declare(whole, prefix + ".attn", config);
}

ChunkedCrossAttention::Layout ChunkedCrossAttention::layout(Backend& be, std::int64_t seq,
                                                            std::int64_t batch) const {
  const std::int64_t m = shape_.chunk_length;
  Layout out;
  out.chunks = (seq + m - 1) / m;
  out.pad = (seq - 1) % m;
  const std::int64_t l = out.chunks, columns = batch * l;
  std::vector<std::int32_t> query(static_cast<std::size_t>(m * columns));
  std::vector<std::int32_t> output(static_cast<std::size_t>(seq * batch));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t c = 0; c < l; ++c) {
        const std::int64_t s = out.pad + c * m + i;
        query[static_cast<std::size_t>(i * columns + b * l + c)] =
            static_cast<std::int32_t>(s < seq ? s * batch + b : seq * batch);
      }
    }
  }
  for (std::int64_t s = 0; s < seq; ++s) {
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t from = s - out.pad;
      output[static_cast<std::size_t>(s * batch + b)] = static_cast<std::int32_t>(
          from < 0 ? m * columns : (from % m) * columns + b * l + from / m);
    }
  }
  out.query_rows = device_ids(be, query);
  out.output_rows = device_ids(be, output);
  return out;
}

std::unique_ptr<nn::Mixer::Saved> ChunkedCrossAttention::forward(const nn::LayerContext& ctx,
                                                                 const Tensor& x,
                                                                 const nn::LayerInputs& inputs,
                                                                 std::uint64_t first_site,
                                                                 Tensor& y) const {
  Backend& be = ctx.backend;
  const Tensor& memory = inputs.require(kEncoderOutput, "Retro's chunked cross-attention");
  const Tensor x_full = gather_sequence(be, tp_, x);
  const std::int64_t seq = x_full.size(0), batch = x.size(1), h = x.size(2);
  auto run = std::make_unique<Run>();
  run->layout = layout(be, seq, batch);
  const std::int64_t columns = batch * run->layout.chunks, m = shape_.chunk_length;
  if (memory.dim() != 3 || memory.size(0) != shape_.retrieved_length * shape_.num_neighbors ||
      memory.size(1) != columns) {
    throw Error("Retro's chunked cross-attention: the encoder output is " +
                shape_str(memory.shape()) + ", expected (" +
                std::to_string(shape_.retrieved_length * shape_.num_neighbors) + ", " +
                std::to_string(columns) + ", " + std::to_string(h) + ") for " +
                std::to_string(batch) + " samples of " + std::to_string(seq) + " tokens");
  }
  run->queries = be.empty({m, columns, h}, x.dtype());
  Tensor query_rows = nn::rows_of(run->queries);
  be.embedding_forward(run->layout.query_rows, nn::rows_of(x_full), 0, query_rows);
  Tensor out = be.empty(run->queries.shape(), x.dtype());
  attention.forward(ctx, run->queries, memory, inputs, first_site, out, run->attention);
  Tensor y_full = tp_.sp() ? be.empty(x_full.shape(), y.dtype()) : y;
  Tensor y_rows = nn::rows_of(y_full);
  be.embedding_forward(run->layout.output_rows, nn::rows_of(out), 0, y_rows);
  if (tp_.sp()) copy_own_rows(be, tp_, y_full, y);
  return run;
}

void ChunkedCrossAttention::backward(const nn::LayerContext& ctx, const Tensor& x, const Tensor& dy,
                                     const nn::LayerInputs& inputs, std::uint64_t first_site,
                                     Saved& saved, Tensor& dx) const {
  Backend& be = ctx.backend;
  Run& run = static_cast<Run&>(saved);
  const Tensor& memory = inputs.require(kEncoderOutput, "Retro's chunked cross-attention");
  Tensor dmemory = inputs.gradient(kEncoderOutput, "Retro's chunked cross-attention backward");
  // Every rank's output was the whole sequence's, each keeping its shard: the whole gradient is
  // the shards' gradients gathered.
  const Tensor dy_full = gather_sequence(be, tp_, dy);
  // Each attention output row went to at most one position: the scatter is its gradient.
  Tensor dout = be.empty(run.queries.shape(), x.dtype());
  Tensor dout_rows = nn::rows_of(dout);
  be.embedding_backward(run.layout.output_rows, nn::rows_of(dy_full), 0, dout_rows, false);
  Tensor dqueries = be.empty(run.queries.shape(), x.dtype());
  attention.backward(ctx, run.queries, memory, dout, inputs, first_site, run.attention, dqueries,
                     dmemory);
  // The attention's input gradient is whole on every rank (plain tensor parallelism).
  Tensor dx_full = tp_.sp() ? be.empty(dy_full.shape(), dx.dtype()) : dx;
  Tensor dx_rows = nn::rows_of(dx_full);
  be.embedding_backward(run.layout.query_rows, nn::rows_of(dqueries), 0, dx_rows, false);
  if (tp_.sp()) copy_own_rows(be, tp_, dx_full, dx);
}

nn::BlockSpec chunked_cross_attention_block(ChunkShape shape) {
  return {"cross_attention",
          {"pre_cross_attn_layernorm", false},
          [shape] { return std::make_unique<ChunkedCrossAttention>(shape); },
          {}};
}

}  // namespace megatron::retro
