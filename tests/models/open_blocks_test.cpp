// The open layer composition: a block kind written outside the core (here, in the test) composed
// with the core's blocks in one layer, in fp64: parameter names and order, dropout-site
// numbering, gradients of its parameters, of x and of a named input it reads against central
// differences; a missing gradient accumulator refused before any backward work.
#include <gtest/gtest.h>

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

// The test's kind, named "gated" behind a norm of its own name, then the core's MLP block.
nn::LayerSpec spec() {
  nn::BlockSpec gated{
      "gated", {"gated_norm", false}, [] { return std::make_unique<GatedLinear>(); }, {}};
  return {{gated, nn::mlp_block()}};
}

struct Fixture {
  ParameterSet params;
  nn::Layer layer;
  Tensor x = random_tensor({kS, kB, kH}, 1);
  Tensor gate = random_tensor({kS, kB, kH}, 2);
  nn::LayerInputs inputs;
  const nn::LayerContext ctx{cpu(), true, 7, 1};

  Fixture() {
    nn::ParamFactory f{params, Device::cpu(), DType::f64};
    layer.declare(f, "decoder.layers.0", config(), spec(), 10);
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

TEST(OpenBlocks, GradientsOfParametersInputAndNamedInputMatchFiniteDifferences) {
  Fixture f;
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
}

}  // namespace
}  // namespace megatron
