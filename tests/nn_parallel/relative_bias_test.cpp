// T5's relative position bias: Megatron's bucket function on hand-computed values, the bias as a
// look-up of the table, the table's gradient against fp64 finite differences, and on 2
// tensor-parallel ranks each rank's head slice of the unsplit bias with the whole unsplit gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "megatron/nn/relative_position_bias.h"
#include "tp_test_util.h"

namespace megatron::tp_test {
namespace {

Backend& cpu() {
  return backend_for(Device::cpu());
}

// Megatron's _relative_position_bucket at 32 buckets, max distance 128 (the values its PyTorch code
// gives). Bidirectional: 16 per direction, exact below 8, then 8 + floor(log(d / 8) / log(16) * 8);
// causal: exact below 16, then 16 + floor(log(d / 16) / log(8) * 16), keys after the query in 0.
TEST(RelativePositionBias, BucketsAreT5s) {
  using nn::relative_position_bucket;
  const std::vector<std::pair<std::int64_t, std::int64_t>> bidirectional = {
      {0, 0},    {-1, 1},    {-7, 7},    {-8, 8},     {-15, 9},  {-16, 10}, {-32, 12},
      {-64, 14}, {-127, 15}, {-128, 15}, {-5000, 15}, {1, 17},   {7, 23},   {8, 24},
      {16, 26},  {32, 28},   {64, 30},   {128, 31},   {5000, 31}};
  for (const auto& [relative, bucket] : bidirectional)
    EXPECT_EQ(relative_position_bucket(relative, true, 32, 128), bucket) << relative;
  const std::vector<std::pair<std::int64_t, std::int64_t>> causal = {
      {5, 0},    {0, 0},    {-1, 1},    {-15, 15},  {-16, 16},
      {-32, 21}, {-64, 26}, {-127, 31}, {-128, 31}, {-999, 31}};
  for (const auto& [relative, bucket] : causal)
    EXPECT_EQ(relative_position_bucket(relative, false, 32, 128), bucket) << relative;
}

struct Built {
  ParameterSet params;
  nn::RelativePositionBias bias;
};

void build(Built& b, const nn::TensorParallelism& tp, DType dtype, bool bidirectional) {
  nn::ParamFactory factory{b.params, Device::cpu(), dtype, tp};
  b.bias.declare(factory, "encoder_relative_pos_emb", 4, bidirectional, 8, 12, 0.5f);
  nn::initialize_parameters(cpu(), b.params, 5);
}

TEST(RelativePositionBias, BiasIsTheTableAtEachBucketAndItsGradientMatchesFiniteDifferences) {
  for (bool bidirectional : {true, false}) {
    SCOPED_TRACE(bidirectional ? "bidirectional" : "causal");
    Built b;
    build(b, {}, DType::f64, bidirectional);
    ASSERT_EQ(b.params.size(), 1u);
    EXPECT_EQ(b.params[0].name, "encoder_relative_pos_emb.relative_attention_bias.weight");
    const nn::LayerContext ctx{cpu()};
    const std::int64_t sq = 5, sk = 19;
    const auto table = b.bias.table->value.to_vector<double>();
    const auto bias = b.bias.forward(ctx, sq, sk).to_vector<double>();
    for (std::int64_t h = 0; h < 4; ++h) {
      for (std::int64_t i = 0; i < sq; ++i) {
        for (std::int64_t j = 0; j < sk; ++j) {
          const std::int64_t bucket = nn::relative_position_bucket(j - i, bidirectional, 8, 12);
          ASSERT_EQ(bias[static_cast<std::size_t>((h * sq + i) * sk + j)],
                    table[static_cast<std::size_t>(bucket * 4 + h)]);
        }
      }
    }
    // loss = sum(bias * w): d table[k, h] = sum of w over the (i, j) in bucket k, head h.
    const Tensor w = random_tensor({4, sq, sk}, 7).to(DType::f64);
    b.bias.backward(ctx, w);
    const auto grad = b.bias.table->grad.to_vector<double>();
    double* v = b.bias.table->value.data<double>();
    const auto weights = w.to_vector<double>();
    auto loss = [&] {
      const auto out = b.bias.forward(ctx, sq, sk).to_vector<double>();
      double s = 0;
      for (std::size_t e = 0; e < out.size(); ++e)
        s += out[e] * weights[e];
      return s;
    };
    for (std::size_t e = 0; e < grad.size(); ++e) {
      const double saved = v[e], step = 1e-6;
      v[e] = saved + step;
      const double plus = loss();
      v[e] = saved - step;
      const double minus = loss();
      v[e] = saved;
      EXPECT_NEAR(grad[e], (plus - minus) / (2 * step), 1e-7) << "table element " << e;
    }
  }
}

// Each of 2 ranks holds the whole table, computes its two heads of the bias and, after the
// backward, the whole unsplit gradient.
TEST(RelativePositionBias, TensorParallelRanksTakeTheirHeadsAndShareTheGradient) {
  const nn::TensorParallelism tp = tensor_group(false);
  Built full, split;
  build(full, {}, DType::f32, true);
  build(split, tp, DType::f32, true);
  EXPECT_EQ(split.bias.table->value.to_vector<float>(), full.bias.table->value.to_vector<float>());
  const nn::LayerContext ctx{cpu()};
  const std::int64_t sq = 6, sk = 6;
  const Tensor whole = full.bias.forward(ctx, sq, sk);
  const Tensor mine = split.bias.forward(ctx, sq, sk);
  const Tensor expected = whole.slice(0, tp.rank * 2, 2).contiguous();
  EXPECT_EQ(mine.to_vector<float>(), expected.to_vector<float>());

  const Tensor w = random_tensor({4, sq, sk}, 11);
  full.bias.backward(ctx, w);
  split.bias.backward(ctx, w.slice(0, tp.rank * 2, 2).contiguous());
  expect_close(split.bias.table->grad, full.bias.table->grad, 1e-6, "table gradient");
}

}  // namespace
}  // namespace megatron::tp_test
