// Which positions a context-parallel rank holds, and its share of a micro-batch
// (megatron/nn/context_parallelism.h).
#include "megatron/nn/context_parallelism.h"

#include <cstring>
#include <string>

#include "megatron/error.h"

namespace megatron::nn {

std::vector<std::int64_t> context_positions(const ContextParallelism& cp, std::int64_t seq) {
  if (seq % (2 * cp.size) != 0) {
    throw Error("context parallelism: a sequence of " + std::to_string(seq) +
                " tokens does not cut into 2 x " + std::to_string(cp.size) + " equal chunks");
  }
  const std::int64_t chunk = seq / (2 * cp.size);
  std::vector<std::int64_t> positions;
  for (const std::int64_t c :
       {static_cast<std::int64_t>(cp.rank), static_cast<std::int64_t>(2 * cp.size - 1 - cp.rank)})
    for (std::int64_t i = 0; i < chunk; ++i)
      positions.push_back(c * chunk + i);
  return positions;
}

namespace {

// (B, S) -> (B, positions.size()): the columns at `positions`, in that order.
Tensor take_columns(const Tensor& field, const std::vector<std::int64_t>& positions) {
  const Tensor t = field.contiguous();
  const std::int64_t b = t.size(0), s = t.size(1), n = static_cast<std::int64_t>(positions.size());
  const std::size_t bytes = dtype_size(t.dtype());
  Tensor out = Tensor::empty({b, n}, t.dtype());
  const auto* from = static_cast<const std::uint8_t*>(t.raw_data());
  auto* to = static_cast<std::uint8_t*>(out.raw_data());
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t source = i * s + positions[static_cast<std::size_t>(j)];
      std::memcpy(to + static_cast<std::size_t>(i * n + j) * bytes,
                  from + static_cast<std::size_t>(source) * bytes, bytes);
    }
  }
  return out;
}

}  // namespace

Batch context_parallel_batch(const Batch& batch, const ContextParallelism& cp, std::int64_t seq,
                             bool with_positions) {
  const std::vector<std::int64_t> positions = context_positions(cp, seq);
  Batch out;
  for (const auto& [name, field] : batch.fields()) {
    const bool per_position = field.dim() == 2 && field.size(1) == seq;
    out.set(name, per_position ? take_columns(field, positions) : field);
  }
  if (with_positions && !batch.has("position_ids") && batch.has("tokens")) {
    const std::int64_t b = batch["tokens"].size(0), n = static_cast<std::int64_t>(positions.size());
    std::vector<std::int32_t> ids(static_cast<std::size_t>(b * n));
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<std::int32_t>(positions[i % static_cast<std::size_t>(n)]);
    out.set("position_ids", Tensor::from(ids, {b, n}));
  }
  return out;
}

}  // namespace megatron::nn
