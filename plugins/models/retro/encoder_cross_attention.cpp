// Retro's encoder cross-attention: the chunk context repeated for each neighbour (a row gather),
// Megatron's CrossAttention, and the repeats' gradients summed back (a scatter-add).
#include "encoder_cross_attention.h"

#include "device_ids.h"
#include "megatron/error.h"

namespace megatron::retro {

struct EncoderCrossAttention::Run : nn::Mixer::Saved {
  Tensor repeat;  // i32: memory row (i, (b l + c) k + j) <- context row (i, b l + c)
  Tensor memory;  // (m, B l k, h)
  nn::CrossAttention::Saved attention;
};

void EncoderCrossAttention::declare(nn::ParamFactory& factory, const std::string& prefix,
                                    const nn::TransformerConfig& config) {
  // The retrieval encoder declares its layers without sequence parallelism (whole neighbours).
  if (factory.tp.sp()) {
    throw Error("Retro's encoder cross-attention (" + prefix +
                ") runs on whole neighbours: declare it without sequence parallelism");
  }
  attention.declare(factory, prefix + ".attn", config);
}

std::unique_ptr<nn::Mixer::Saved> EncoderCrossAttention::forward(const nn::LayerContext& ctx,
                                                                 const Tensor& x,
                                                                 const nn::LayerInputs& inputs,
                                                                 std::uint64_t first_site,
                                                                 Tensor& y) const {
  Backend& be = ctx.backend;
  const Tensor& context = inputs.require(kChunkContext, "Retro's encoder cross-attention");
  const std::int64_t columns = x.size(1), h = x.size(2);
  if (context.dim() != 3 || context.size(1) * neighbors_ != columns) {
    throw Error("Retro's encoder cross-attention: the chunk context is " +
                shape_str(context.shape()) + ", expected (chunk length, " +
                std::to_string(columns / neighbors_) + ", " + std::to_string(h) + ") for " +
                std::to_string(columns) + " neighbour columns of " + std::to_string(neighbors_) +
                " neighbours");
  }
  auto run = std::make_unique<Run>();
  const std::int64_t m = context.size(0), chunks = context.size(1);
  std::vector<std::int32_t> repeat(static_cast<std::size_t>(m * columns));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t col = 0; col < columns; ++col)
      repeat[static_cast<std::size_t>(i * columns + col)] =
          static_cast<std::int32_t>(i * chunks + col / neighbors_);
  run->repeat = device_ids(be, repeat);
  run->memory = be.empty({m, columns, h}, x.dtype());
  Tensor memory_rows = nn::rows_of(run->memory);
  be.embedding_forward(run->repeat, nn::rows_of(context), 0, memory_rows);
  attention.forward(ctx, x, run->memory, inputs, first_site, y, run->attention);
  return run;
}

void EncoderCrossAttention::backward(const nn::LayerContext& ctx, const Tensor& x, const Tensor& dy,
                                     const nn::LayerInputs& inputs, std::uint64_t first_site,
                                     Saved& saved, Tensor& dx) const {
  Backend& be = ctx.backend;
  Run& run = static_cast<Run&>(saved);
  Tensor dcontext = inputs.gradient(kChunkContext, "Retro's encoder cross-attention backward");
  Tensor dmemory = be.empty(run.memory.shape(), x.dtype());
  be.fill(dmemory, 0.0);
  attention.backward(ctx, x, run.memory, dy, inputs, first_site, run.attention, dx, dmemory);
  // Each chunk's context served its k neighbours: their gradients add up.
  Tensor dcontext_rows = nn::rows_of(dcontext);
  be.embedding_backward(run.repeat, nn::rows_of(dmemory), 0, dcontext_rows, true);
}

nn::BlockSpec encoder_cross_attention_block(std::int64_t num_neighbors) {
  nn::BlockSpec spec{
      "cross_attention",
      {"pre_cross_attn_layernorm", false},
      [num_neighbors] { return std::make_unique<EncoderCrossAttention>(num_neighbors); },
      {}};
  spec.residual_from_norm = true;
  return spec;
}

}  // namespace megatron::retro
