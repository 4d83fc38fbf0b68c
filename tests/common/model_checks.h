// Shared model-test helpers: random fp64 tensors, GPT-style random batches, a model's single named
// loss, and the fp64 central-difference check of every parameter tensor's gradient.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "megatron/batch.h"
#include "megatron/model.h"
#include "megatron/nn/model_config.h"

namespace megatron::test {

// An fp64 host tensor of normal(0, std) values drawn from `seed`.
inline Tensor random_tensor(const Shape& shape, unsigned seed, double std = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, std);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& e : v)
    e = normal(rng);
  return Tensor::from(v, shape);
}

// The tests' small GPT: 2 layers, hidden 16, 4 heads (and query groups) of 4, an MLP of `ffn`,
// dropout off, init std 0.2 (large enough that every path carries a visible gradient), the
// vocabulary padded to a multiple of 8.
inline nn::ModelConfig tiny_gpt_config(std::int64_t ffn) {
  nn::ModelConfig c;
  nn::TransformerConfig& t = c.transformer;
  t.num_layers = 2;
  t.hidden_size = 16;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 4;
  t.ffn_hidden_size = ffn;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  t.init_method_std = 0.2f;
  c.make_vocab_size_divisible_by = 8;
  return c;
}

// (b, s) random tokens and labels below `vocab`; loss mask 0 where masked_out(i) for flat index i.
inline Batch gpt_batch(std::int64_t b, std::int64_t s, std::int64_t vocab, unsigned seed,
                       const std::function<bool(std::size_t)>& masked_out) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(b * s)), labels(tokens.size());
  std::vector<float> mask(tokens.size(), 1.0f);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
    labels[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
    if (masked_out(i)) mask[i] = 0.0f;
  }
  Batch batch;
  batch.set("tokens", Tensor::from(tokens, {b, s}));
  batch.set("labels", Tensor::from(labels, {b, s}));
  batch.set("loss_mask", Tensor::from(mask, {b, s}));
  return batch;
}

// A model's only loss term, which must be called `name` (GPT's "lm loss": sum = the masked loss
// sum, count = the token count).
inline LossTerm only_loss(const StepResult& r, const std::string& name = "lm loss") {
  EXPECT_EQ(r.losses.size(), 1u);
  const LossTerm* term = r.find(name);
  if (!term) {
    ADD_FAILURE() << "no \"" << name << "\" term";
    return {};
  }
  return *term;
}

// d objective / d v by central differences of step h; v is restored.
inline double central_difference(double& v, const std::function<double()>& objective, double h) {
  const double saved = v;
  v = saved + h;
  const double plus = objective();
  v = saved - h;
  const double minus = objective();
  v = saved;
  return (plus - minus) / (2 * h);
}

// Central differences (step h) on `per_tensor` random elements of every fp64 parameter against
// the gradients a backward left in Parameter::grad; `objective` re-runs the forward and returns
// the value whose gradient that was.
inline void expect_gradients_match_finite_differences(ParameterSet& params,
                                                      const std::function<double()>& objective,
                                                      int per_tensor = 4, double h = 1e-6) {
  std::mt19937 rng(3);
  for (auto& p : params) {
    double* v = p->value.data<double>();
    const double* g = p->grad.data<double>();
    const std::int64_t n = p->value.numel();
    for (int k = 0; k < per_tensor; ++k) {
      const auto i = static_cast<std::int64_t>(rng() % static_cast<unsigned>(n));
      const double numeric = central_difference(v[i], objective, h);
      EXPECT_NEAR(g[i], numeric, 1e-7 + 1e-5 * std::abs(numeric)) << p->name << "[" << i << "]";
    }
  }
}

// a . b over every element (fp64 host tensors of one size).
inline double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    s += x[i] * y[i];
  return s;
}

// Central differences of `objective` on every `stride`-th element of `t` (an fp64 host tensor the
// objective reads) against `grad`, less what an accumulator held before backward (`held`).
inline void expect_input_gradient(Tensor& t, const Tensor& grad,
                                  const std::function<double()>& objective, const std::string& what,
                                  std::int64_t stride = 3, const Tensor& held = {},
                                  double h = 1e-6) {
  double* v = t.data<double>();
  const std::vector<double> g = grad.to_vector<double>();
  const std::vector<double> before =
      held.defined() ? held.to_vector<double>() : std::vector<double>(g.size(), 0.0);
  for (std::int64_t i = 0; i < t.numel(); i += stride) {
    const double numeric = central_difference(v[i], objective, h);
    const auto k = static_cast<std::size_t>(i);
    EXPECT_NEAR(g[k] - before[k], numeric, 1e-7 + 1e-5 * std::abs(numeric))
        << what << "[" << i << "]";
  }
}

}  // namespace megatron::test
