// The MoE block in fp64: its parameters (Megatron's router / grouped experts / shared experts
// names), gradients of the router, the experts, the shared experts and the input against central
// differences of an objective that includes the load-balancing and z losses (dropless, with
// capacity dropping, padded to capacity, SwiGLU and GeLU), the losses it reports, and the
// dispatch against a per-token reference (each token through its experts, weighted).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/model_checks.h"
#include "megatron/error.h"
#include "megatron/nn/moe/moe_block.h"

namespace megatron {
namespace {

constexpr std::int64_t kS = 3, kB = 2, kH = 8, kExperts = 4;

Backend& cpu() {
  return backend_for(Device::cpu());
}
using test::random_tensor;

nn::TransformerConfig config(bool swiglu, double capacity = 0, bool pad = false,
                             std::int64_t shared = 0) {
  nn::TransformerConfig c;
  c.hidden_size = kH;
  c.num_layers = 2;
  c.swiglu = swiglu;
  c.add_bias_linear = false;
  c.gelu = GeluApproximation::none;
  nn::MoeConfig& m = c.moe;
  m.num_experts = kExperts;
  m.ffn_hidden_size = 6;
  m.layer_pattern = {1, 1};
  m.routing.num_experts = kExperts;
  m.routing.topk = 2;
  m.aux_loss_coeff = 0.05;
  m.z_loss_coeff = 0.01;
  m.capacity_factor = capacity;
  m.pad_to_capacity = pad;
  m.shared_expert_ffn = shared;
  return c;
}

struct Fixture {
  ParameterSet params, buffers;
  nn::MoeBlock block;
  nn::TransformerConfig tc;
  Tensor x = random_tensor({kS, kB, kH}, 1);
  Tensor w = random_tensor({kS, kB, kH}, 2);
  float loss_scale = 1.0f;

  explicit Fixture(const nn::TransformerConfig& c) : tc(c) {
    nn::ParamFactory f{params, Device::cpu(), DType::f64, {}, {}, &buffers};
    block.declare(f, "decoder.layers.0.mlp", tc);
    unsigned seed = 10;
    for (auto& p : params) {
      cpu().copy(random_tensor(p->value.shape(), seed++, 0.5), p->value);
      cpu().fill(p->grad, 0.0);
    }
  }
  // y and the reported losses of one training forward.
  Tensor forward(nn::AuxLosses& aux, std::unique_ptr<nn::Mixer::Saved>* keep = nullptr) {
    nn::LayerContext ctx{cpu(), true, 7, 1, DType::f64, loss_scale, &aux};
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    auto saved = block.forward(ctx, x, {}, 0, y);
    if (keep) *keep = std::move(saved);
    return y;
  }
  // sum(w * y) + the block's losses with their coefficients: what backward differentiates.
  double objective() {
    nn::AuxLosses aux;
    const std::vector<double> y = forward(aux).to_vector<double>(), wv = w.to_vector<double>();
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i)
      sum += y[i] * wv[i];
    for (const auto& [name, term] : aux.terms)
      sum += term.first * (name == "z_loss" ? tc.moe.z_loss_coeff : tc.moe.aux_loss_coeff);
    return sum;
  }
};

void check_gradients(const nn::TransformerConfig& c) {
  Fixture f(c);
  nn::AuxLosses aux;
  std::unique_ptr<nn::Mixer::Saved> saved;
  f.forward(aux, &saved);
  Tensor dx = Tensor::empty(f.x.shape(), DType::f64);
  const nn::LayerContext ctx{cpu(), true, 7, 1, DType::f64, 1.0f, nullptr};
  f.block.backward(ctx, f.x, f.w, {}, 0, *saved, dx);
  test::expect_gradients_match_finite_differences(
      f.params, [&] { return f.objective(); }, 6);
  const double h = 1e-6;
  for (std::int64_t i = 0; i < f.x.numel(); i += 3) {
    double& v = f.x.data<double>()[i];
    const double at = v;
    v = at + h;
    const double plus = f.objective();
    v = at - h;
    const double minus = f.objective();
    v = at;
    const double want = (plus - minus) / (2 * h);
    EXPECT_NEAR(dx.data<double>()[i], want, 1e-7 + 1e-5 * std::abs(want)) << "dx " << i;
  }
}

TEST(MoeBlock, ParametersAreTheRouterAndTheGroupedExperts) {
  Fixture f(config(true, 0, false, 5));
  std::vector<std::string> names;
  for (auto& p : f.params)
    names.push_back(p->name + " " + shape_str(p->value.shape()));
  const std::string m = "decoder.layers.0.mlp.";
  EXPECT_EQ(names, (std::vector<std::string>{m + "router.weight [4, 8]",
                                             m + "experts.linear_fc1.weight [4, 12, 8]",
                                             m + "experts.linear_fc2.weight [4, 8, 6]",
                                             m + "shared_experts.linear_fc1.weight [10, 8]",
                                             m + "shared_experts.linear_fc2.weight [8, 5]"}));
}

TEST(MoeBlock, DroplessGradientsIncludingTheAuxiliaryLosses) {
  check_gradients(config(true));
  check_gradients(config(false));
}

TEST(MoeBlock, GradientsWithCapacityDroppingPaddingAndSharedExperts) {
  // Capacity ceil(6 tokens x 2 / 4 experts x 1.0) = 3: some pair is dropped, so the output
  // differs from dropless; padding adds zero-weight rows only, so it equals the dropped output.
  nn::AuxLosses aux;
  const std::vector<double> dropless = Fixture(config(true)).forward(aux).to_vector<double>();
  const std::vector<double> dropped = Fixture(config(true, 1.0)).forward(aux).to_vector<double>();
  const std::vector<double> padded =
      Fixture(config(true, 1.0, true)).forward(aux).to_vector<double>();
  EXPECT_NE(dropless, dropped);
  ASSERT_EQ(dropped.size(), padded.size());
  for (std::size_t i = 0; i < padded.size(); ++i)  // equal but for the GEMMs' blocking
    EXPECT_NEAR(dropped[i], padded[i], 1e-12) << i;
  check_gradients(config(true, 1.0));
  check_gradients(config(false, 1.0, true));
  check_gradients(config(true, 0, false, 5));
}

TEST(MoeBlock, OutputIsEachTokensExpertsWeightedAndLossesAreReported) {
  nn::TransformerConfig c = config(false);
  Fixture f(c);
  nn::AuxLosses aux;
  const Tensor y = f.forward(aux);
  ASSERT_EQ(aux.terms.size(), 2u);
  EXPECT_EQ(aux.terms.at("load_balancing_loss").second, 1.0);
  EXPECT_GT(aux.terms.at("load_balancing_loss").first, 0.0);
  EXPECT_GT(aux.terms.at("z_loss").first, 0.0);

  // Per token: its logits, softmax over the top-2, each chosen expert's GeLU MLP, weighted sum.
  const std::vector<double> xv = f.x.to_vector<double>(), yv = y.to_vector<double>();
  const std::vector<double> wr = f.block.router.weight->value.to_vector<double>();
  const std::vector<double> w1 = f.block.fc1->value.to_vector<double>();
  const std::vector<double> w2 = f.block.fc2->value.to_vector<double>();
  const std::int64_t ffn = 6;
  for (std::int64_t t = 0; t < kS * kB; ++t) {
    const double* xt = xv.data() + t * kH;
    std::vector<double> logits(kExperts, 0.0);
    for (std::int64_t e = 0; e < kExperts; ++e)
      for (std::int64_t j = 0; j < kH; ++j)
        logits[static_cast<std::size_t>(e)] += wr[static_cast<std::size_t>(e * kH + j)] * xt[j];
    std::int64_t first = 0, second = -1;
    for (std::int64_t e = 1; e < kExperts; ++e)
      if (logits[static_cast<std::size_t>(e)] > logits[static_cast<std::size_t>(first)]) first = e;
    for (std::int64_t e = 0; e < kExperts; ++e)
      if (e != first && (second < 0 || logits[static_cast<std::size_t>(e)] >
                                           logits[static_cast<std::size_t>(second)]))
        second = e;
    const double l1 = logits[static_cast<std::size_t>(first)];
    const double l2 = logits[static_cast<std::size_t>(second)];
    const double p1 = 1.0 / (1.0 + std::exp(l2 - l1));
    std::vector<double> want(kH, 0.0);
    for (const auto& [e, p] : {std::pair{first, p1}, std::pair{second, 1.0 - p1}}) {
      std::vector<double> act(ffn);
      for (std::int64_t i = 0; i < ffn; ++i) {
        double a = 0;
        for (std::int64_t j = 0; j < kH; ++j)
          a += w1[static_cast<std::size_t>((e * ffn + i) * kH + j)] * xt[j];
        act[static_cast<std::size_t>(i)] = 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0)));
      }
      for (std::int64_t j = 0; j < kH; ++j)
        for (std::int64_t i = 0; i < ffn; ++i)
          want[static_cast<std::size_t>(j)] +=
              p * w2[static_cast<std::size_t>((e * kH + j) * ffn + i)] *
              act[static_cast<std::size_t>(i)];
    }
    for (std::int64_t j = 0; j < kH; ++j)
      EXPECT_NEAR(yv[static_cast<std::size_t>(t * kH + j)], want[static_cast<std::size_t>(j)],
                  1e-12)
          << "token " << t << " feature " << j;
  }

  // Evaluation reports nothing and adds no loss.
  nn::AuxLosses none;
  nn::LayerContext eval{cpu(), false, 7, 1, DType::f64, 1.0f, &none};
  Tensor y2 = Tensor::empty(f.x.shape(), DType::f64);
  f.block.forward(eval, f.x, {}, 0, y2);
  EXPECT_TRUE(none.terms.empty());
  EXPECT_EQ(y2.to_vector<double>(), yv);
}

// The aux-loss-free expert bias: a zero f32 buffer named as Megatron's, never a parameter; each
// iteration it moves by the update rate towards the experts that took fewer than the mean of the
// tokens routed in its training forwards (not in evaluation or recomputed ones), and it steers
// the selection.
TEST(MoeBlock, ExpertBiasCountsTrainingForwardsAndSteersTheChoice) {
  nn::TransformerConfig c = config(true);
  c.moe.routing.score = nn::moe::ScoreFunction::sigmoid;
  c.moe.expert_bias = true;
  c.moe.bias_update_rate = 0.125;
  Fixture f(c);
  ASSERT_EQ(f.buffers.size(), 1u);
  ASSERT_EQ(f.block.expert_bias, &f.buffers[0]);
  EXPECT_EQ(f.block.expert_bias->name, "decoder.layers.0.mlp.router.expert_bias");
  EXPECT_EQ(f.block.expert_bias->value.dtype(), DType::f32);
  EXPECT_EQ(f.block.expert_bias->value.to_vector<float>(), std::vector<float>(kExperts, 0.0f));
  EXPECT_EQ(f.params.find("decoder.layers.0.mlp.router.expert_bias"), nullptr);

  // The tokens each expert takes in a training forward, from the router's own logits.
  const std::vector<double> xv = f.x.to_vector<double>();
  const std::vector<double> wr = f.block.router.weight->value.to_vector<double>();
  std::vector<double> logits(kS * kB * kExperts, 0.0);
  for (std::int64_t t = 0; t < kS * kB; ++t)
    for (std::int64_t e = 0; e < kExperts; ++e)
      for (std::int64_t j = 0; j < kH; ++j)
        logits[static_cast<std::size_t>(t * kExperts + e)] +=
            wr[static_cast<std::size_t>(e * kH + j)] * xv[static_cast<std::size_t>(t * kH + j)];
  const nn::moe::Routing r = nn::moe::route(c.moe.routing, logits.data(), kS * kB);
  std::vector<float> want(kExperts, 0.0f);
  bool uneven = false;
  for (std::int64_t e = 0; e < kExperts; ++e) {
    double taken = 0;
    for (std::int64_t t = 0; t < kS * kB; ++t)
      taken += r.map[static_cast<std::size_t>(t * kExperts + e)];
    const double mean = kS * kB * 2.0 / kExperts;
    want[static_cast<std::size_t>(e)] = 0.125f * static_cast<float>((taken < mean) - (taken > mean));
    uneven = uneven || taken != mean;
  }
  ASSERT_TRUE(uneven) << "the fixture's routing is even: the update would not move";

  nn::AuxLosses aux;
  f.forward(aux);
  // Neither an evaluation forward nor a recomputed one (no loss sink) counts.
  Tensor y = Tensor::empty(f.x.shape(), DType::f64);
  f.block.forward({cpu(), false, 7, 1, DType::f64, 1.0f, &aux}, f.x, {}, 0, y);
  f.block.forward({cpu(), true, 7, 1, DType::f64, 1.0f, nullptr}, f.x, {}, 0, y);
  f.block.end_training_iteration(cpu(), nullptr);
  EXPECT_EQ(f.block.expert_bias->value.to_vector<float>(), want);
  // The counts were reset: an iteration without training forwards leaves the bias.
  f.block.forward({cpu(), true, 7, 1, DType::f64, 1.0f, nullptr}, f.x, {}, 0, y);
  f.block.end_training_iteration(cpu(), nullptr);
  EXPECT_EQ(f.block.expert_bias->value.to_vector<float>(), want);

  // A large bias on expert 3 sends every token there (the weights stay the sigmoid's).
  std::vector<float> steer(kExperts, 0.0f);
  steer[3] = 100.0f;
  cpu().copy(Tensor::from(steer, {kExperts}), f.block.expert_bias->value);
  f.forward(aux);
  f.block.end_training_iteration(cpu(), nullptr);
  EXPECT_EQ(f.block.expert_bias->value.to_vector<float>()[3], 100.0f - 0.125f);

  // Declaring it needs the model's buffer set.
  ParameterSet params;
  nn::ParamFactory no_buffers{params, Device::meta(), DType::f32};
  nn::MoeBlock block;
  EXPECT_THROW(block.declare(no_buffers, "decoder.layers.0.mlp", c), Error);
}

// Tensor parallelism needs sequence parallelism, experts split over tensor-parallel ranks are not
// built, and the experts must divide over the expert-parallel group: each refused naming the key.
// With sequence parallelism, expert_tensor_parallel_size 1 and EP 2, rank 1 holds experts 2-3.
TEST(MoeBlock, ParallelLayoutsRefusedOrSplitByExperts) {
  auto message = [](nn::TensorParallelism tp, nn::ExpertParallelism ep) {
    ParameterSet params;
    nn::ParamFactory f{params, Device::meta(), DType::f32, tp, ep};
    nn::MoeBlock block;
    try {
      block.declare(f, "decoder.layers.0.mlp", config(true));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({nullptr, 0, 2, false}, {}).find("needs sequence_parallel = true"),
            std::string::npos);
  EXPECT_NE(message({nullptr, 0, 2, true}, {nullptr, 0, 1, 2}).find("expert_tensor_parallel_size"),
            std::string::npos);
  EXPECT_NE(message({}, {nullptr, 0, 3, 1}).find("expert_model_parallel_size 3 must divide"),
            std::string::npos);

  ParameterSet params;
  nn::ParamFactory f{params, Device::meta(), DType::f32, {nullptr, 0, 2, true}, {nullptr, 1, 2, 1}};
  nn::MoeBlock block;
  block.declare(f, "decoder.layers.0.mlp", config(true));
  EXPECT_TRUE(block.router.weight->sequence_parallel);
  EXPECT_EQ(block.fc1->global_shape[0], 4);
  EXPECT_EQ(block.fc1->value.size(0), 2);
  EXPECT_EQ(block.fc2->value.size(0), 2);
  EXPECT_EQ(shard_runs(*block.fc1).front().global_offset, 2);
}

}  // namespace
}  // namespace megatron
