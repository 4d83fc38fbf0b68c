// Which positions a context-parallel rank holds, and its share of a micro-batch
// (megatron/nn/context_parallelism.h).
#include "megatron/nn/context_parallelism.h"

#include <algorithm>
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
                             const SampleSpec& model_inputs) {
  const std::vector<std::int64_t> positions = context_positions(cp, seq);
  Batch out;
  for (const auto& [name, field] : batch.fields()) {
    const FieldSpec* spec = find_field(model_inputs, name);
    const bool per_position =
        field.dim() == 2 && field.size(1) == seq && !(spec != nullptr && spec->whole_sequence);
    out.set(name, per_position ? take_columns(field, positions) : field);
  }
  const auto ids_field = std::find_if(model_inputs.begin(), model_inputs.end(),
                                      [](const auto& f) { return f.kind == FieldKind::token_ids; });
  if (find_field(model_inputs, "position_ids") && !batch.has("position_ids") &&
      ids_field != model_inputs.end() && batch.has(ids_field->name)) {
    const std::int64_t b = batch[ids_field->name].size(0),
                       n = static_cast<std::int64_t>(positions.size());
    std::vector<std::int32_t> ids(static_cast<std::size_t>(b * n));
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<std::int32_t>(positions[i % static_cast<std::size_t>(n)]);
    out.set("position_ids", Tensor::from(ids, {b, n}));
  }
  return out;
}

double context_parallel_sum(Backend& be, const ContextParallelism& cp, double value) {
  return context_parallel_sum(be, cp, std::vector<double>{value})[0];
}

std::vector<double> context_parallel_sum(Backend& be, const ContextParallelism& cp,
                                         std::vector<double> values) {
  if (!cp.split() || values.empty()) return values;
  const auto n = static_cast<std::int64_t>(values.size());
  Tensor host = Tensor::from(values, {n});
  Tensor summed = be.empty({n}, DType::f64);
  be.copy(host, summed);
  cp.comm->all_reduce(summed.raw_data(), values.size(), DType::f64, ReduceOp::sum);
  be.copy(summed, host);
  return host.to_vector<double>();
}

}  // namespace megatron::nn
