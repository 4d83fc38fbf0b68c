// Conformance of l2_norm, adamw_step and sgd_step: fp64 references of torch.optim's formulas over
// several steps, values recorded from torch itself, views, determinism and argument checks.
#include <cmath>
#include <vector>

#include "backend_test_util.h"

namespace megatron::testing {
namespace {

class OptimizerTest : public BackendTest {
 protected:
  // A device copy with the same layout: contiguous, or a transposed 2-D view.
  Tensor upload_layout(const Tensor& t) const {
    if (t.is_contiguous()) return upload(t);
    return upload(t.transpose(0, 1).contiguous()).transpose(0, 1);
  }
  template <typename T>
  void check_sgd(DType dtype, const SgdParams& h);
  double norm(const std::vector<Tensor>& tensors) {
    std::vector<const Tensor*> pointers;
    for (const Tensor& t : tensors)
      pointers.push_back(&t);
    return be().l2_norm(pointers);
  }
};

template <typename Call>
void expect_error(Call&& call, const char* op, const char* fragment) {
  try {
    call();
    ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(op), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

// ---- l2_norm ----------------------------------------------------------------------------------

std::vector<Tensor> norm_inputs(std::uint64_t seed) {
  return {
      random_tensor({100, 123}, DType::f32, seed),                    // several chunks
      random_tensor({57, 81}, DType::f64, seed + 1).transpose(0, 1),  // strided view
      random_tensor({1000}, DType::bf16, seed + 2),
      random_tensor({3, 333}, DType::f16, seed + 3),
      Tensor::empty({0, 5}, DType::f32),
      random_tensor({1}, DType::f32, seed + 4),
  };
}

TEST_P(OptimizerTest, L2NormMatchesReference) {
  const auto host_inputs = norm_inputs(1);
  double sum = 0;
  for (const Tensor& t : host_inputs) {
    for (double v : t.to_vector<double>())
      sum += v * v;
  }
  std::vector<Tensor> inputs;
  for (const Tensor& t : host_inputs)
    inputs.push_back(upload_layout(t));
  const double result = norm(inputs);
  EXPECT_NEAR(result, std::sqrt(sum), 1e-13 * std::sqrt(sum));
  EXPECT_EQ(norm({}), 0.0);
  EXPECT_EQ(norm({upload(Tensor::from(std::vector<float>{3.0f, -4.0f}, {2}))}), 5.0);
}

TEST_P(OptimizerTest, L2NormIsBitwiseDeterministic) {
  std::vector<Tensor> inputs;
  for (const Tensor& t : norm_inputs(2)) {
    if (t.is_contiguous()) inputs.push_back(upload(t));
  }
  inputs.push_back(upload(random_tensor({300001}, DType::f32, 3)));
  const Tensor matrix = upload(random_tensor({301, 205}, DType::f32, 4));
  inputs.push_back(matrix.transpose(0, 1));
  auto run = [&](int threads) {
    ScopedThreads scoped(threads);
    return norm(inputs);
  };
  const double one = run(1);
  EXPECT_EQ(one, run(1));
  EXPECT_EQ(one, run(2));
  EXPECT_EQ(run(2), run(2));
  // The order is defined on logical elements, so a view and its contiguous copy agree exactly.
  const Tensor view = matrix.transpose(0, 1);
  EXPECT_EQ(norm({view}), norm({upload(download(view))}));
}

TEST_P(OptimizerTest, L2NormRejectsBadArguments) {
  const Tensor ids = upload(Tensor::from(std::vector<std::int32_t>{1, 2}, {2}));
  expect_error([&] { norm({ids}); }, "l2_norm", "tensors[0] must be float32");
  std::vector<const Tensor*> with_null = {nullptr};
  expect_error([&] { be().l2_norm(with_null); }, "l2_norm", "tensors[0] is null");
}

// ---- AdamW ------------------------------------------------------------------------------------

// torch.optim.AdamW's update, written out in fp64 (hyperparameters as the float values given).
struct AdamReference {
  std::vector<double> p, m, v;
  void step(const std::vector<double>& g, const AdamParams& h) {
    const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps, wd = h.weight_decay;
    const double t = static_cast<double>(h.step);
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
  }
};

TEST_P(OptimizerTest, AdamWMatchesReferenceOverSeveralSteps) {
  const Shape shape = {37, 29};
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor p0 = random_tensor(shape, dtype, 1);
    Tensor param = upload(p0), m = empty(shape, dtype), v = empty(shape, dtype);
    be().fill(m, 0);
    be().fill(v, 0);
    AdamReference ref{p0.to_vector<double>(), std::vector<double>(p0.numel(), 0.0),
                      std::vector<double>(p0.numel(), 0.0)};
    AdamParams h;
    h.lr = 3e-3f;
    h.beta1 = 0.9f;
    h.beta2 = 0.95f;
    h.eps = 1e-8f;
    h.weight_decay = 0.1f;
    for (std::int64_t step = 1; step <= 6; ++step) {
      h.step = step;
      const Tensor g = random_tensor(shape, dtype, 100 + static_cast<std::uint64_t>(step));
      be().adamw_step(param, upload(g), m, v, h);
      ref.step(g.to_vector<double>(), h);
    }
    const Tolerance tol = dtype == DType::f64 ? Tolerance{1e-14, 1e-13} : Tolerance{1e-6, 1e-6};
    EXPECT_TRUE(all_close(download(param), Tensor::from(ref.p, shape), tol));
    EXPECT_TRUE(all_close(download(m), Tensor::from(ref.m, shape), tol));
    EXPECT_TRUE(all_close(download(v), Tensor::from(ref.v, shape), tol));
  }
}

// The gradient of step t, element i, used for the values recorded from torch below.
std::vector<float> torch_case_grad(int t) {
  std::vector<float> g;
  for (int i = 0; i < 6; ++i) {
    g.push_back(static_cast<float>(0.1 * (i + 1) * ((i + t) % 2 ? -1 : 1) + 0.05 * t));
  }
  return g;
}
const std::vector<float> kTorchCaseParam = {0.5f, -1.25f, 2.0f, 0.0f, 3.0f, -0.75f};

// Recorded once with torch 1.13 (Debian python3-torch) in float32:
//   f = lambda x: float(np.float32(x)); p = Parameter(tensor([0.5, -1.25, 2.0, 0.0, 3.0, -0.75]))
//   grad(t) = tensor([0.1*(i+1)*(-1)**(i+t) + 0.05*t for i in range(6)], dtype=float32)
//   AdamW([p], lr=f(1e-2), betas=(f(0.9), f(0.95)), eps=f(1e-8), weight_decay=f(0.1)), 3 steps;
//   SGD([p], lr=f(0.1), momentum=f(0.9), weight_decay=f(0.01), nesterov=False/True), 3 steps;
//   SGD([p], lr=f(0.1), weight_decay=f(0.01)), 3 steps.
TEST_P(OptimizerTest, MatchesValuesRecordedFromTorch) {
  const Tolerance two_ulp = {0, 2.5e-7};
  {
    Tensor param = upload(Tensor::from(kTorchCaseParam, {6}));
    Tensor m = upload(Tensor::zeros({6}, DType::f32)), v = upload(Tensor::zeros({6}, DType::f32));
    AdamParams h;
    h.lr = 1e-2f;
    h.beta1 = 0.9f;
    h.beta2 = 0.95f;
    h.eps = 1e-8f;
    h.weight_decay = 0.1f;
    for (int t = 1; t <= 3; ++t) {
      h.step = t;
      be().adamw_step(param, upload(Tensor::from(torch_case_grad(t), {6})), m, v, h);
    }
    const std::vector<double> torch_param = {0.4972415864467621, -1.266358733177185,
                                             2.001145601272583,  -0.01674748957157135,
                                             3.0004146099090576, -0.7632447481155396};
    const std::vector<double> torch_m = {0.018950004130601883,  0.046250008046627045,
                                         0.0007499998318962753, 0.06445001065731049,
                                         -0.01744999922811985,  0.08265001326799393};
    const std::vector<double> torch_v = {0.0021378130186349154, 0.009420313872396946,
                                         0.011545315384864807,  0.028537819162011147,
                                         0.03236281871795654,   0.0590653270483017};
    EXPECT_TRUE(all_close(download(param), Tensor::from(torch_param, {6}), two_ulp));
    EXPECT_TRUE(all_close(download(m), Tensor::from(torch_m, {6}), two_ulp));
    EXPECT_TRUE(all_close(download(v), Tensor::from(torch_v, {6}), two_ulp));
  }
  const std::vector<std::vector<double>> torch_sgd = {
      {0.46774837374687195, -1.3266583681106567, 1.995484709739685, -0.11980903893709183,
       3.0260233879089355, -0.9017491936683655},
      {0.4494982063770294, -1.365109920501709, 1.9898918867111206, -0.1776001751422882,
       3.0343029499053955, -0.9740203022956848},
      {0.4785114824771881, -1.2962137460708618, 1.993996024131775, -0.06994004547595978,
       3.010979175567627, -0.8376722931861877}};
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("sgd variant " + std::to_string(variant));
    Tensor param = upload(Tensor::from(kTorchCaseParam, {6}));
    Tensor buf = upload(Tensor::zeros({6}, DType::f32));
    SgdParams h;
    h.lr = 0.1f;
    h.momentum = variant == 2 ? 0.0f : 0.9f;
    h.weight_decay = 0.01f;
    h.nesterov = variant == 1;
    for (int t = 1; t <= 3; ++t) {
      be().sgd_step(param, upload(Tensor::from(torch_case_grad(t), {6})),
                    variant == 2 ? nullptr : &buf, h);
    }
    EXPECT_TRUE(all_close(download(param), Tensor::from(torch_sgd[variant], {6}), two_ulp));
  }
}

// ---- SGD --------------------------------------------------------------------------------------

// torch.optim.SGD (dampening 0) with its own first-step rule: the buffer does not exist until the
// first step, which sets it to the (weight-decayed) gradient. Computed in T like torch.
template <typename T>
struct SgdReference {
  std::vector<T> p, buf;
  bool has_buffer = false;
  void step(const std::vector<T>& g, const SgdParams& h) {
    const T lr = h.lr, mu = h.momentum, wd = h.weight_decay;
    for (std::size_t i = 0; i < p.size(); ++i) {
      T d = g[i] + wd * p[i];
      if (mu != 0) {
        buf[i] = has_buffer ? buf[i] * mu + d : d;
        d = h.nesterov ? d + mu * buf[i] : buf[i];
      }
      p[i] = p[i] + -lr * d;
    }
    has_buffer = true;
  }
};

template <typename T>
void OptimizerTest::check_sgd(DType dtype, const SgdParams& h) {
  const Shape shape = {41, 23};
  const Tensor p0 = random_tensor(shape, dtype, 7);
  Tensor param = upload(p0);
  // The documented rule: a buffer zeroed before the first step.
  Tensor buf = upload(Tensor::zeros(shape, dtype));
  SgdReference<T> ref{p0.to_vector<T>(), std::vector<T>(p0.numel(), T(0))};
  for (int step = 1; step <= 5; ++step) {
    const Tensor g = random_tensor(shape, dtype, 200 + static_cast<std::uint64_t>(step));
    be().sgd_step(param, upload(g), h.momentum != 0 ? &buf : nullptr, h);
    ref.step(g.to_vector<T>(), h);
    if (step == 1) {
      // The zero buffer reproduces torch's first step (buf = d) exactly.
      EXPECT_TRUE(bitwise_equal(download(param), Tensor::from(ref.p, shape)));
      if (h.momentum != 0) {
        EXPECT_TRUE(bitwise_equal(download(buf), Tensor::from(ref.buf, shape)));
      }
    }
  }
  const Tolerance tol = dtype == DType::f64 ? Tolerance{1e-15, 1e-14} : Tolerance{1e-7, 1e-6};
  EXPECT_TRUE(all_close(download(param), Tensor::from(ref.p, shape), tol));
  if (h.momentum != 0) {
    EXPECT_TRUE(all_close(download(buf), Tensor::from(ref.buf, shape), tol));
  }
}

TEST_P(OptimizerTest, SgdMatchesTorchFormulasOverSeveralSteps) {
  for (float momentum : {0.0f, 0.9f}) {
    for (bool nesterov : {false, true}) {
      if (nesterov && momentum == 0) continue;
      for (float weight_decay : {0.0f, 0.05f}) {
        SgdParams h;
        h.lr = 0.05f;
        h.momentum = momentum;
        h.nesterov = nesterov;
        h.weight_decay = weight_decay;
        SCOPED_TRACE("momentum " + std::to_string(momentum) + (nesterov ? " nesterov" : "") +
                     " weight_decay " + std::to_string(weight_decay));
        check_sgd<float>(DType::f32, h);
        check_sgd<double>(DType::f64, h);
      }
    }
  }
}

// ---- views, determinism, arguments --------------------------------------------------------------

// Strided views update the same elements as contiguous tensors, with the same bits.
TEST_P(OptimizerTest, UpdatesThroughViewsMatchContiguous) {
  const Tensor p0 = random_tensor({19, 33}, DType::f32, 8);
  const Tensor g0 = random_tensor({19, 33}, DType::f32, 9);
  const Tensor v0 = random_tensor({19, 33}, DType::f32, 10, 0.0f, 1.0f);
  AdamParams adam;
  adam.weight_decay = 0.01f;
  adam.step = 3;
  SgdParams sgd;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 0.01f;
  auto run = [&](bool as_views) {
    // Views: (33, 19) storage transposed to (19, 33).
    auto place = [&](const Tensor& t) {
      return as_views ? upload_layout(t.transpose(0, 1).contiguous().transpose(0, 1)) : upload(t);
    };
    Tensor param = place(p0), m = place(g0), v = place(v0), buf = place(g0);
    const Tensor grad = place(g0);
    be().adamw_step(param, grad, m, v, adam);
    be().sgd_step(param, grad, &buf, sgd);
    return std::vector<Tensor>{download(param), download(m), download(v), download(buf)};
  };
  const auto contiguous = run(false), views = run(true);
  for (std::size_t k = 0; k < contiguous.size(); ++k) {
    EXPECT_TRUE(bitwise_equal(contiguous[k], views[k])) << k;
  }
}

TEST_P(OptimizerTest, StepsAreDeterministicAcrossThreads) {
  const Shape shape = {100003};
  const Tensor p0 = random_tensor(shape, DType::f32, 10);
  const Tensor g = upload(random_tensor(shape, DType::f32, 11));
  const Tensor v0 = random_tensor(shape, DType::f32, 12, 0.0f, 1.0f);
  auto run = [&](int threads) {
    ScopedThreads scoped(threads);
    Tensor param = upload(p0), m = upload(p0), v = upload(v0), buf = upload(p0);
    AdamParams adam;
    adam.weight_decay = 0.1f;
    adam.step = 2;
    be().adamw_step(param, g, m, v, adam);
    SgdParams sgd;
    sgd.momentum = 0.9f;
    sgd.weight_decay = 0.01f;
    be().sgd_step(param, g, &buf, sgd);
    return std::vector<Tensor>{download(param), download(m), download(v), download(buf)};
  };
  const auto one = run(1);
  for (const auto& other : {run(1), run(2), run(2)}) {
    for (std::size_t k = 0; k < one.size(); ++k)
      EXPECT_TRUE(bitwise_equal(one[k], other[k])) << k;
  }
}

TEST_P(OptimizerTest, StepsRejectBadArguments) {
  Tensor p = empty({4}, DType::f32), m = empty({4}, DType::f32), v = empty({4}, DType::f32);
  const Tensor g = empty({4}, DType::f32);
  AdamParams adam;
  adam.step = 0;
  expect_error([&] { be().adamw_step(p, g, m, v, adam); }, "adamw_step", "step must be >= 1");
  adam.step = 1;
  adam.beta2 = 1.0f;
  expect_error([&] { be().adamw_step(p, g, m, v, adam); }, "adamw_step", "beta2 must be in [0, 1)");
  adam.beta2 = 0.999f;
  const Tensor g64 = empty({4}, DType::f64);
  expect_error([&] { be().adamw_step(p, g64, m, v, adam); }, "adamw_step", "dtype");
  Tensor short_m = empty({3}, DType::f32);
  expect_error([&] { be().adamw_step(p, g, short_m, v, adam); }, "adamw_step", "exp_avg");
  SgdParams sgd;
  sgd.momentum = 0.9f;
  expect_error([&] { be().sgd_step(p, g, nullptr, sgd); }, "sgd_step", "momentum_buf is null");
  sgd.momentum = 0;
  sgd.nesterov = true;
  expect_error([&] { be().sgd_step(p, g, nullptr, sgd); }, "sgd_step", "nesterov");
  sgd.nesterov = false;
  sgd.lr = -1;
  expect_error([&] { be().sgd_step(p, g, nullptr, sgd); }, "sgd_step", "lr must be >= 0");
}

MEGATRON_INSTANTIATE_BACKENDS(OptimizerTest);

}  // namespace
}  // namespace megatron::testing
