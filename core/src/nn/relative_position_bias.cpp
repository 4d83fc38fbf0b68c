// T5's relative position bias: bucket ids on the host, table look-ups and their gradient with the
// embedding ops, head slices per tensor-parallel rank.
#include "megatron/nn/relative_position_bias.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "megatron/error.h"

namespace megatron::nn {

std::int64_t relative_position_bucket(std::int64_t relative, bool bidirectional,
                                      std::int64_t num_buckets, std::int64_t max_distance) {
  std::int64_t bucket = 0;
  std::int64_t distance = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (relative > 0) bucket += num_buckets;
    distance = relative < 0 ? -relative : relative;
  } else {
    distance = relative < 0 ? -relative : 0;
  }
  const std::int64_t max_exact = num_buckets / 2;
  if (distance < max_exact) return bucket + distance;
  // float32 throughout, as torch evaluates it on the float tensor (Python floats become float32).
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const auto log_range = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / log_range * static_cast<float>(num_buckets - max_exact);
  const std::int64_t large = max_exact + static_cast<std::int64_t>(scaled);
  return bucket + std::min(large, num_buckets - 1);
}

void RelativePositionBias::declare(ParamFactory& factory, const std::string& prefix,
                                   std::int64_t heads, bool bidirectional, std::int64_t num_buckets,
                                   std::int64_t max_distance, float init_std) {
  if (num_buckets < (bidirectional ? 4 : 2) || max_distance < 1) {
    throw ConfigError("relative position bias: relative_attention_num_buckets (" +
                      std::to_string(num_buckets) + ") must be at least " +
                      (bidirectional ? "4" : "2") + " and relative_attention_max_distance (" +
                      std::to_string(max_distance) + ") at least 1");
  }
  tp_ = factory.tp;
  if (heads % tp_.size != 0) {
    throw ConfigError("relative position bias: num_attention_heads (" + std::to_string(heads) +
                      ") must be divisible by tensor_model_parallel_size (" +
                      std::to_string(tp_.size) + ")");
  }
  bidirectional_ = bidirectional;
  num_buckets_ = num_buckets;
  max_distance_ = max_distance;
  heads_ = heads;
  ParamFactory replicated = factory;
  replicated.tp = {};  // every rank holds the whole table
  table = &replicated.declare(prefix + ".relative_attention_bias.weight", {num_buckets, heads},
                              ParamInit::normal, init_std, true);
}

Tensor RelativePositionBias::buckets(Backend& be, std::int64_t sq, std::int64_t sk) const {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(sq * sk));
  for (std::int64_t i = 0; i < sq; ++i) {
    for (std::int64_t j = 0; j < sk; ++j) {
      ids[static_cast<std::size_t>(i * sk + j)] = static_cast<std::int32_t>(
          relative_position_bucket(j - i, bidirectional_, num_buckets_, max_distance_));
    }
  }
  Tensor out = be.empty({sq * sk}, DType::i32);
  be.copy(Tensor::from(ids, {sq * sk}), out);
  return out;
}

Tensor RelativePositionBias::forward(const LayerContext& ctx, std::int64_t sq,
                                     std::int64_t sk) const {
  Backend& be = ctx.backend;
  const DType dt = table->value.dtype();
  const std::int64_t local = heads_ / tp_.size;
  Tensor rows = be.empty({sq * sk, heads_}, dt);
  be.embedding_forward(buckets(be, sq, sk), table->value, 0, rows);
  Tensor bias = be.empty({local, sq, sk}, dt);
  be.copy(rows.view({sq, sk, heads_}).slice(2, tp_.rank * local, local).permute({2, 0, 1}), bias);
  return bias;
}

void RelativePositionBias::backward(const LayerContext& ctx, const Tensor& dbias) const {
  Backend& be = ctx.backend;
  const std::int64_t local = dbias.size(0), sq = dbias.size(1), sk = dbias.size(2);
  const DType dt = table->value.dtype();
  // This rank's heads in their columns, zeros elsewhere: the all-reduce then assembles the whole
  // gradient (adding exact zeros), the same on every rank and for every layout.
  Tensor drows = be.empty({sq * sk, heads_}, dt);
  be.fill(drows, 0.0);
  Tensor mine = drows.view({sq, sk, heads_}).slice(2, tp_.rank * local, local).permute({2, 0, 1});
  be.copy(dbias, mine);
  Tensor partial = be.empty(table->grad.shape(), dt);
  be.embedding_backward(buckets(be, sq, sk), drows, 0, partial, false);
  tp_all_reduce(tp_, partial);
  be.add(table->grad, partial, table->grad);
}

}  // namespace megatron::nn
