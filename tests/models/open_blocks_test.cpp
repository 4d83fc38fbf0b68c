// The open layer composition: a block kind written outside the core (here, in the test) composed
// with the core's blocks in one layer, in fp64: parameter names and order, dropout-site
// numbering, gradients of its parameters, of x and of a named input it reads against central
// differences; a missing gradient accumulator refused before any backward work.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/model_checks.h"
#include "megatron/error.h"
#include "megatron/nn/core_blocks.h"
#include "megatron/nn/layer.h"
#include "megatron/nn/linear.h"

namespace megatron {
namespace {

constexpr std::int64_t kS = 4, kB = 2, kH = 6;
constexpr const char* kGate = "gate";

Backend& cpu() {
  return backend_for(Device::cpu());
}

using test::random_tensor;

// y = Linear(x) * gate, the gate a named per-micro-batch input (S, B, h) whose gradient the
// block adds. Reserves two dropout sites of its own (unused) to test the numbering.
class GatedLinear : public nn::Mixer {
 public:
  struct State : Saved {
    Tensor z;  // Linear(x)
  };
  std::uint64_t dropout_sites() const override { return 2; }
  std::vector<std::string> gradient_inputs() const override { return {kGate}; }
  void declare(nn::ParamFactory& factory, const std::string& prefix,
               const nn::TransformerConfig& config) override {
    linear = nn::Linear::declare(factory, prefix + ".linear", config.hidden_size,
                                 config.hidden_size, true, config.init_method_std);
  }
  std::unique_ptr<Saved> forward(const nn::LayerContext& ctx, const Tensor& x,
                                 const nn::LayerInputs& inputs, std::uint64_t,
                                 Tensor& y) const override {
    const Tensor& gate = inputs.require(kGate, "gated linear");
    auto state = std::make_unique<State>();
    state->z = ctx.backend.empty(x.shape(), x.dtype());
    Tensor z_rows = nn::rows_of(state->z);
    linear.forward(ctx.backend, nn::rows_of(x), z_rows);
    for (std::int64_t i = 0; i < x.numel(); ++i)
      y.data<double>()[i] = state->z.data<double>()[i] * gate.data<double>()[i];
    return state;
  }
  void backward(const nn::LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const nn::LayerInputs& inputs, std::uint64_t, Saved& saved,
                Tensor& dx) const override {
    const Tensor& gate = inputs.require(kGate, "gated linear");
    Tensor dgate = inputs.gradient(kGate, "gated linear");
    const Tensor& z = static_cast<State&>(saved).z;
    Tensor dz = ctx.backend.empty(x.shape(), x.dtype());
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      dz.data<double>()[i] = dy.data<double>()[i] * gate.data<double>()[i];
      dgate.data<double>()[i] += dy.data<double>()[i] * z.data<double>()[i];
    }
    Tensor dx_rows = nn::rows_of(dx);
    linear.backward(ctx.backend, nn::rows_of(x), nn::rows_of(dz), &dx_rows);
  }
  nn::Linear linear;
};

nn::TransformerConfig config() {
  nn::TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = kH;
  c.num_attention_heads = 2;
  c.num_query_groups = 2;
  c.kv_channels = 3;
  c.ffn_hidden_size = 10;
  c.hidden_dropout = 0.2f;
  c.init_method_std = 0.4f;
  return c;
}

// The test's kind, named "gated" behind a norm of its own name, then the core's MLP block; with
// `residual_from_norm` the gated block adds its output to its normed input.
nn::LayerSpec spec(bool residual_from_norm = false) {
  nn::BlockSpec gated{
      "gated", {"gated_norm", false}, [] { return std::make_unique<GatedLinear>(); }, {}};
  gated.residual_from_norm = residual_from_norm;
  return {{gated, nn::mlp_block()}};
}

struct Fixture {
  ParameterSet params;
  nn::Layer layer;
  Tensor x = random_tensor({kS, kB, kH}, 1);
  Tensor gate = random_tensor({kS, kB, kH}, 2);
  nn::LayerInputs inputs;
  const nn::LayerContext ctx{cpu(), true, 7, 1};

  explicit Fixture(bool residual_from_norm = false) {
    nn::ParamFactory f{params, Device::cpu(), DType::f64};
    layer.declare(f, "decoder.layers.0", config(), spec(residual_from_norm), 10);
    nn::initialize_parameters(cpu(), params, 11);
    unsigned seed = 100;
    for (auto& p : params)
      cpu().copy(random_tensor(p->value.shape(), seed++, 0.4), p->value);
    inputs.set(kGate, gate);
  }
  Tensor forward(nn::Layer::Saved& saved, bool keep) {
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    layer.forward(ctx, x, inputs, y, saved, keep);
    return y;
  }
};

TEST(OpenBlocks, ParametersInBlockOrderAndSitesNumberedPerBlock) {
  Fixture f;
  std::vector<std::string> names;
  for (auto& p : f.params)
    names.push_back(p->name);
  const std::string l = "decoder.layers.0.";
  EXPECT_EQ(names,
            (std::vector<std::string>{l + "gated_norm.weight", l + "gated_norm.bias",
                                      l + "gated.linear.weight", l + "gated.linear.bias",
                                      l + "pre_mlp_layernorm.weight", l + "pre_mlp_layernorm.bias",
                                      l + "mlp.linear_fc1.weight", l + "mlp.linear_fc1.bias",
                                      l + "mlp.linear_fc2.weight", l + "mlp.linear_fc2.bias"}));
  // Gated: its own 2 sites and its hidden dropout; the MLP block: its hidden dropout.
  EXPECT_EQ(nn::Layer::dropout_sites(spec()), 4u);
  ASSERT_EQ(f.layer.num_blocks(), 2u);
  EXPECT_NE(f.layer.mixer<GatedLinear>(0), nullptr);
  EXPECT_NE(f.layer.mixer<nn::MlpBlock>(1), nullptr);
  EXPECT_EQ(f.layer.mixer<nn::SelfAttentionBlock>(1), nullptr);
}

void check_gradients(bool residual_from_norm) {
  Fixture f(residual_from_norm);
  const Tensor w = random_tensor({kS, kB, kH}, 3);
  const auto objective = [&] {
    nn::Layer::Saved unused;
    const std::vector<double> y = f.forward(unused, false).to_vector<double>();
    const std::vector<double> weights = w.to_vector<double>();
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i)
      sum += y[i] * weights[i];
    return sum;
  };
  nn::Layer::Saved saved;
  const std::vector<double> y = f.forward(saved, true).to_vector<double>();
  {  // a forward that keeps nothing computes the same output (with the same dropout masks)
    nn::Layer::Saved unused;
    EXPECT_EQ(f.forward(unused, false).to_vector<double>(), y);
    EXPECT_FALSE(unused.valid);
  }
  ASSERT_TRUE(saved.valid);
  ASSERT_EQ(saved.blocks.size(), 2u);

  // Without an accumulator for the gate's gradient, backward refuses before any work.
  Tensor dx = Tensor::empty(f.x.shape(), DType::f64);
  try {
    f.layer.backward(f.ctx, w, f.inputs, saved, dx);
    ADD_FAILURE() << "backward without a gate gradient accumulator did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer input 'gate'"), std::string::npos) << e.what();
  }
  for (auto& p : f.params)
    EXPECT_EQ(p->grad.to_vector<double>(), std::vector<double>(p->grad.numel(), 0.0)) << p->name;
  ASSERT_TRUE(saved.valid);

  Tensor dgate = Tensor::zeros(f.gate.shape(), DType::f64);
  f.inputs.collect_gradient(kGate, dgate);
  f.layer.backward(f.ctx, w, f.inputs, saved, dx);
  EXPECT_FALSE(saved.valid);
  test::expect_gradients_match_finite_differences(f.params, objective);

  const auto expect_input_gradient = [&](Tensor& t, const Tensor& grad, const char* what) {
    const double h = 1e-6;
    for (std::int64_t i = 0; i < t.numel(); i += 5) {
      double& v = t.data<double>()[i];
      const double at = v;
      v = at + h;
      const double plus = objective();
      v = at - h;
      const double minus = objective();
      v = at;
      const double want = (plus - minus) / (2 * h);
      EXPECT_NEAR(grad.data<double>()[i], want, 1e-6 * (1 + std::abs(want))) << what << " " << i;
    }
  };
  expect_input_gradient(f.x, dx, "dx");
  expect_input_gradient(f.gate, dgate, "dgate");
}

TEST(OpenBlocks, GradientsOfParametersInputAndNamedInputMatchFiniteDifferences) {
  check_gradients(false);
}

// A block whose residual is its normed input (Retro's encoder cross-attention): without dropout
// the layer's output moves by exactly Norm(x) - x against the pre-norm residual, and every
// gradient still matches finite differences.
TEST(OpenBlocks, ResidualFromTheNormedInput) {
  Fixture plain(false);
  const nn::LayerContext eval{cpu(), false};
  nn::Layer::Saved unused;
  Tensor a = Tensor::empty(plain.x.shape(), DType::f64);
  Tensor b = Tensor::empty(plain.x.shape(), DType::f64);
  // Only the gated block: its norm's output from a layer whose blocks are norm -> identity.
  nn::Layer first_plain, first_norm;
  {
    ParameterSet p1, p2;
    nn::ParamFactory f1{p1, Device::cpu(), DType::f64}, f2{p2, Device::cpu(), DType::f64};
    const nn::LayerSpec s1{{spec(false).blocks[0]}}, s2{{spec(true).blocks[0]}};
    first_plain.declare(f1, "decoder.layers.0", config(), s1, 10);
    first_norm.declare(f2, "decoder.layers.0", config(), s2, 10);
    unsigned seed = 100;
    for (std::size_t k = 0; k < p1.size(); ++k, ++seed) {
      cpu().copy(random_tensor(p1[k].value.shape(), seed, 0.4), p1[k].value);
      cpu().copy(random_tensor(p2[k].value.shape(), seed, 0.4), p2[k].value);
    }
    first_plain.forward(eval, plain.x, plain.inputs, a, unused, false);
    first_norm.forward(eval, plain.x, plain.inputs, b, unused, false);
    // Norm(x): the norm's weights and biases are the block's first two parameters.
    const std::vector<double> x = plain.x.to_vector<double>();
    const std::vector<double> w = p1[0].value.to_vector<double>(),
                              beta = p1[1].value.to_vector<double>();
    for (std::int64_t row = 0; row < kS * kB; ++row) {
      double mean = 0, var = 0;
      for (std::int64_t e = 0; e < kH; ++e)
        mean += x[static_cast<std::size_t>(row * kH + e)] / kH;
      for (std::int64_t e = 0; e < kH; ++e) {
        const double d = x[static_cast<std::size_t>(row * kH + e)] - mean;
        var += d * d / kH;
      }
      for (std::int64_t e = 0; e < kH; ++e) {
        const auto i = static_cast<std::size_t>(row * kH + e);
        const double normed = (x[i] - mean) /
                                  std::sqrt(var + static_cast<double>(config().norm_epsilon)) *
                                  w[static_cast<std::size_t>(e)] +
                              beta[static_cast<std::size_t>(e)];
        EXPECT_NEAR(b.data<double>()[i] - a.data<double>()[i], normed - x[i], 1e-12) << i;
      }
    }
  }
  check_gradients(true);
}

TEST(OpenBlocks, BadSpecsAreRefused) {
  ParameterSet params;
  nn::ParamFactory f{params, Device::cpu(), DType::f64};
  nn::Layer layer;
  EXPECT_THROW(layer.declare(f, "decoder.layers.0", config(), nn::LayerSpec{}, 0), Error);
  nn::LayerSpec no_factory{{nn::BlockSpec{"odd", {}, {}, {}}}};
  try {
    layer.declare(f, "decoder.layers.0", config(), no_factory, 0);
    ADD_FAILURE() << "a block without a mixer factory was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "layer decoder.layers.0: block 'odd' has no mixer to make");
  }
  nn::BlockSpec normless{"gated", {}, [] { return std::make_unique<GatedLinear>(); }, {}};
  normless.residual_from_norm = true;
  try {
    layer.declare(f, "decoder.layers.0", config(), nn::LayerSpec{{normless}}, 0);
    ADD_FAILURE() << "a residual from a missing norm was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "layer decoder.layers.0: block 'gated' takes its residual from its norm but has no "
              "norm");
  }
}

}  // namespace
}  // namespace megatron
