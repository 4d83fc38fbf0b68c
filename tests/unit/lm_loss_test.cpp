// nn::lm_loss against a plain fp64 log-softmax written here: loss sum, token count and the
// gradients of hidden, weight and bias, with every row counted, some rows masked, and only a few
// rows counted (BERT's masked LM, where only those rows go through the output layer and the
// others must get exactly zero gradient).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/nn/init.h"
#include "megatron/nn/lm_loss.h"

namespace megatron {
namespace {

constexpr std::int64_t kRows = 10, kHidden = 6, kVocab = 13;

std::vector<double> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.7);
  std::vector<double> v(n);
  for (double& x : v)
    x = normal(rng);
  return v;
}

struct Expected {
  double loss_sum = 0, count = 0;
  std::vector<double> dhidden, dweight, dbias;
};

// loss_i = logsumexp(logits_i) - logits_i[label_i]; the objective is scale * sum(mask loss) /
// count.
Expected reference(const std::vector<double>& h, const std::vector<double>& w,
                   const std::vector<double>& bias, const std::vector<std::int32_t>& labels,
                   const std::vector<double>& mask, double scale) {
  Expected e;
  e.dhidden.assign(h.size(), 0.0);
  e.dweight.assign(w.size(), 0.0);
  e.dbias.assign(bias.size(), 0.0);
  for (double m : mask)
    e.count += m;
  for (std::int64_t r = 0; r < kRows; ++r) {
    const double m = mask[static_cast<std::size_t>(r)];
    if (m == 0) continue;
    std::vector<double> logits(kVocab);
    double top = -INFINITY;
    for (std::int64_t v = 0; v < kVocab; ++v) {
      double z = bias[static_cast<std::size_t>(v)];
      for (std::int64_t d = 0; d < kHidden; ++d)
        z += h[static_cast<std::size_t>(r * kHidden + d)] *
             w[static_cast<std::size_t>(v * kHidden + d)];
      logits[static_cast<std::size_t>(v)] = z;
      top = std::max(top, z);
    }
    double sum = 0;
    for (double z : logits)
      sum += std::exp(z - top);
    const std::int32_t label = labels[static_cast<std::size_t>(r)];
    e.loss_sum += m * (top + std::log(sum) - logits[static_cast<std::size_t>(label)]);
    for (std::int64_t v = 0; v < kVocab; ++v) {
      const double p = std::exp(logits[static_cast<std::size_t>(v)] - top) / sum;
      const double dz = scale * m / e.count * (p - (v == label ? 1.0 : 0.0));
      e.dbias[static_cast<std::size_t>(v)] += dz;
      for (std::int64_t d = 0; d < kHidden; ++d) {
        e.dhidden[static_cast<std::size_t>(r * kHidden + d)] +=
            dz * w[static_cast<std::size_t>(v * kHidden + d)];
        e.dweight[static_cast<std::size_t>(v * kHidden + d)] +=
            dz * h[static_cast<std::size_t>(r * kHidden + d)];
      }
    }
  }
  return e;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12 + 1e-10 * std::abs(want[i])) << what << "[" << i << "]";
}

void check(const std::vector<double>& mask) {
  Backend& be = backend_for(Device::cpu());
  ParameterSet params;
  nn::ParamFactory factory{params, Device::cpu(), DType::f64};
  Parameter& weight = factory.declare("output_layer.weight", {kVocab, kHidden}, ParamInit::zeros);
  Parameter& bias = factory.declare("output_layer.bias", {kVocab}, ParamInit::zeros);
  const auto h = random_values(kRows * kHidden, 1);
  const auto w = random_values(kVocab * kHidden, 2), b = random_values(kVocab, 3);
  be.copy(Tensor::from(w, {kVocab, kHidden}), weight.value);
  be.copy(Tensor::from(b, {kVocab}), bias.value);
  nn::zero_gradients(be, params);  // lm_loss accumulates into them
  std::vector<std::int32_t> labels(kRows);
  for (std::int64_t r = 0; r < kRows; ++r)  // BERT: -1 where nothing is predicted
    labels[static_cast<std::size_t>(r)] = mask[static_cast<std::size_t>(r)] != 0
                                              ? static_cast<std::int32_t>((r * 5 + 2) % kVocab)
                                              : -1;
  const double scale = 2.5;
  Tensor dhidden = Tensor::empty({kRows, kHidden}, DType::f64);
  be.fill(dhidden, 7.0);  // stale values must be overwritten
  const nn::LmLossResult got =
      nn::lm_loss(be, Tensor::from(h, {kRows, kHidden}), weight, Tensor::from(labels, {kRows}),
                  Tensor::from(mask, {kRows}).to(DType::f32), static_cast<float>(scale), &dhidden,
                  DType::f32, {}, &bias);
  const Expected want = reference(h, w, b, labels, mask, scale);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-12 * std::abs(want.loss_sum));
  EXPECT_EQ(got.token_count, want.count);
  expect_near(dhidden.to_vector<double>(), want.dhidden, "dhidden");
  expect_near(weight.grad.to_vector<double>(), want.dweight, "dweight");
  expect_near(bias.grad.to_vector<double>(), want.dbias, "dbias");
}

TEST(LmLoss, EveryRowCounted) {
  check(std::vector<double>(kRows, 1.0));
}

TEST(LmLoss, SomeRowsMasked) {
  check({1, 0, 1, 1, 1, 0, 1, 1, 1, 1});
}

// At most half the rows counted: only those go through the output layer.
TEST(LmLoss, OnlyAFewRowsCounted) {
  check({0, 1, 0, 0, 1, 0, 0, 0, 1, 0});
}

TEST(LmLoss, NoRowCounted) {
  check(std::vector<double>(kRows, 0.0));
}

}  // namespace
}  // namespace megatron
