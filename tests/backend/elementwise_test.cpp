// Elementwise ops (bias add and gradient, add/scale/axpy, GeLU erf and tanh, SwiGLU, dropout):
// conformance against naive fp64 references over awkward shapes and strided views, fp64
// finite-difference gradients, determinism across runs and thread counts, and argument errors.
#include <cmath>
#include <limits>
#include <numbers>

#include "backend/elementwise_math.h"
#include "megatron/tensor/philox.h"
#include "row_ops_test_util.h"

namespace megatron::testing {
namespace {

using ElementwiseTest = BackendTest;
MEGATRON_INSTANTIATE_BACKENDS(ElementwiseTest);

const Shape kShapes[] = {{1}, {7}, {1, 1}, {3, 1}, {1, 33}, {5, 3}, {2, 3, 33}, {4, 1000}};

// ---- fp64 references, written from the textbook definitions --------------------------------
double gelu_erf_ref(double x) {
  return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
}
double gelu_erf_grad_ref(double x) {
  return 0.5 * (1 + std::erf(x / std::numbers::sqrt2)) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
}
// Megatron's constants, as written in its bias_gelu.
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(0.79788456 * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_grad_ref(double x) {
  const double t = std::tanh(0.79788456 * x * (1 + 0.044715 * x * x));
  return 0.5 * x * ((1 - t * t) * (0.79788456 + 3 * 0.79788456 * 0.044715 * x * x)) + 0.5 * (1 + t);
}
double sigmoid_ref(double x) {
  return 1 / (1 + std::exp(-x));
}

std::int64_t last(const Shape& s) {
  return s.back();
}

std::string describe(DType dtype, const Shape& shape, Layout layout) {
  return std::string(dtype_name(dtype)) + " " + shape_str(shape) + " " + layout_name(layout);
}

// A 1-D parameter in a layout a 1-D tensor can have.
Layout vector_layout(Layout layout) {
  return layout == Layout::contiguous ? Layout::contiguous : Layout::strided_last;
}

// ---- bias add / bias grad ---------------------------------------------------------------------

TEST_P(ElementwiseTest, BiasAddMatchesReference) {
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : kAllLayouts) {
        SCOPED_TRACE(describe(dtype, shape, layout));
        const std::int64_t n = last(shape);
        Tensor x = random_on(be(), shape, dtype, 1, layout);
        Tensor bias = random_on(be(), {n}, dtype, 2, vector_layout(layout));
        Tensor y = make_tensor(be(), shape, dtype, layout);
        be().bias_add(x, bias, y);
        const auto xv = host_values(be(), x), bv = host_values(be(), bias);
        std::vector<double> expected(xv.size());
        for (std::size_t i = 0; i < xv.size(); ++i)
          expected[i] = xv[i] + bv[i % n];
        EXPECT_TRUE(all_close(to_host(be(), y), reference(expected, shape), tolerance_for(dtype)));
        be().bias_add(x, bias, x);  // in place
        EXPECT_TRUE(all_close(to_host(be(), x), reference(expected, shape), tolerance_for(dtype)));
      }
    }
  }
}

TEST_P(ElementwiseTest, BiasGradSumsRowsAndAccumulates) {
  const Shape shapes[] = {{1}, {1, 5}, {9, 3}, {1000, 3}, {3, 7, 33}, {70, 1000}};
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : shapes) {
      for (Layout layout : kAllLayouts) {
        SCOPED_TRACE(describe(dtype, shape, layout));
        const std::int64_t n = last(shape);
        Tensor dy = random_on(be(), shape, dtype, 3, layout);
        const auto g = host_values(be(), dy);
        std::vector<double> sums(static_cast<std::size_t>(n), 0.0);
        for (std::size_t i = 0; i < g.size(); ++i)
          sums[i % n] += g[i];
        // f32 sums of R terms of magnitude <= 1: rounding grows with the number of rows.
        const double rows = static_cast<double>(g.size()) / static_cast<double>(n);
        Tolerance tol = tolerance_for(dtype);
        tol.atol *= std::max(1.0, std::sqrt(rows));

        Tensor dbias = filled_on(be(), {n}, dtype, 123.0, vector_layout(layout));
        be().bias_grad(dy, dbias, /*accumulate=*/false);
        EXPECT_TRUE(all_close(to_host(be(), dbias), reference(sums, {n}), tol));

        Tensor accumulated = filled_on(be(), {n}, dtype, 0.5, vector_layout(layout));
        be().bias_grad(dy, accumulated, /*accumulate=*/true);
        std::vector<double> plus_old = sums;
        for (double& v : plus_old)
          v += 0.5;
        EXPECT_TRUE(all_close(to_host(be(), accumulated), reference(plus_old, {n}), tol));
      }
    }
  }
}

// ---- add / scale / axpy --------------------------------------------------------------------

TEST_P(ElementwiseTest, AddScaleAxpyMatchReference) {
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : kAllLayouts) {
        SCOPED_TRACE(describe(dtype, shape, layout));
        const Tolerance tol = tolerance_for(dtype);
        Tensor a = random_on(be(), shape, dtype, 4, layout);
        Tensor b = random_on(be(), shape, dtype, 5, Layout::contiguous);
        const auto av = host_values(be(), a), bv = host_values(be(), b);
        std::vector<double> sum(av.size()), scaled(av.size()), axpy(av.size());
        for (std::size_t i = 0; i < av.size(); ++i) {
          sum[i] = av[i] + bv[i];
          scaled[i] = av[i] * -1.75;
          axpy[i] = bv[i] + 0.3 * av[i];
        }
        Tensor y = make_tensor(be(), shape, dtype, layout);
        be().add(a, b, y);
        EXPECT_TRUE(all_close(to_host(be(), y), reference(sum, shape), tol)) << "add";

        be().axpy(0.3, a, b);
        EXPECT_TRUE(all_close(to_host(be(), b), reference(axpy, shape), tol)) << "axpy";

        be().scale(a, -1.75);
        EXPECT_TRUE(all_close(to_host(be(), a), reference(scaled, shape), tol)) << "scale";

        be().add(a, y, a);  // y aliasing an input
        const auto yv = host_values(be(), y);
        for (std::size_t i = 0; i < av.size(); ++i)
          scaled[i] += yv[i];
        EXPECT_TRUE(all_close(to_host(be(), a), reference(scaled, shape), tol)) << "add in place";
      }
    }
  }
}

// ---- GeLU ----------------------------------------------------------------------------------

struct GeluCase {
  GeluApproximation approx;
  double (*value)(double);
  double (*grad)(double);
  const char* name;
};
const GeluCase kGelus[] = {{GeluApproximation::none, gelu_erf_ref, gelu_erf_grad_ref, "erf"},
                           {GeluApproximation::tanh, gelu_tanh_ref, gelu_tanh_grad_ref, "tanh"}};

TEST_P(ElementwiseTest, GeluForwardBackwardMatchReference) {
  for (const GeluCase& gelu : kGelus) {
    for (DType dtype : kFloatTypes) {
      for (const Shape& shape : kShapes) {
        for (Layout layout : kAllLayouts) {
          SCOPED_TRACE(std::string(gelu.name) + " " + describe(dtype, shape, layout));
          Tensor x = random_on(be(), shape, dtype, 6, layout, -6.0f, 6.0f);
          Tensor dy = random_on(be(), shape, dtype, 7, Layout::contiguous);
          Tensor y = make_tensor(be(), shape, dtype, layout);
          Tensor dx = make_tensor(be(), shape, dtype, layout);
          be().gelu_forward(x, y, gelu.approx);
          be().gelu_backward(dy, x, dx, gelu.approx);
          const auto xv = host_values(be(), x), gv = host_values(be(), dy);
          std::vector<double> value(xv.size()), grad(xv.size());
          for (std::size_t i = 0; i < xv.size(); ++i) {
            value[i] = gelu.value(xv[i]);
            grad[i] = gv[i] * gelu.grad(xv[i]);
          }
          EXPECT_TRUE(all_close(to_host(be(), y), reference(value, shape), tolerance_for(dtype)));
          EXPECT_TRUE(all_close(to_host(be(), dx), reference(grad, shape), tolerance_for(dtype)));
        }
      }
    }
  }
}

TEST_P(ElementwiseTest, TanhForwardBackwardMatchReference) {
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : kAllLayouts) {
        SCOPED_TRACE("tanh " + describe(dtype, shape, layout));
        // Past +-20 tanh is +-1 in every dtype: the tails must not overflow into NaN.
        Tensor x = random_on(be(), shape, dtype, 16, layout, -30.0f, 30.0f);
        Tensor dy = random_on(be(), shape, dtype, 17, Layout::contiguous);
        Tensor y = make_tensor(be(), shape, dtype, layout);
        Tensor dx = make_tensor(be(), shape, dtype, layout);
        be().tanh_forward(x, y);
        be().tanh_backward(dy, y, dx);
        const auto xv = host_values(be(), x), gv = host_values(be(), dy);
        std::vector<double> value(xv.size()), grad(xv.size());
        for (std::size_t i = 0; i < xv.size(); ++i) {
          value[i] = std::tanh(xv[i]);
          grad[i] = gv[i] * (1.0 - value[i] * value[i]);
        }
        EXPECT_TRUE(all_close(to_host(be(), y), reference(value, shape), tolerance_for(dtype)));
        EXPECT_TRUE(all_close(to_host(be(), dx), reference(grad, shape), tolerance_for(dtype)));
      }
    }
  }
}

TEST_P(ElementwiseTest, GeluIsFiniteAndAccurateInTheTails) {
  const std::vector<double> points = {-200, -30, -12, -6, -3, -1e-3, 0, 1e-3, 3, 6, 12, 30, 200};
  const Shape shape{static_cast<std::int64_t>(points.size())};
  for (const GeluCase& gelu : kGelus) {
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE(std::string(gelu.name) + " " + std::string(dtype_name(dtype)));
      Tensor x = upload(Tensor::from(points, shape).to(dtype));
      Tensor dy = filled_on(be(), shape, dtype, 1.0);
      Tensor y = empty(shape, dtype), dx = empty(shape, dtype);
      be().gelu_forward(x, y, gelu.approx);
      be().gelu_backward(dy, x, dx, gelu.approx);
      std::vector<double> value, grad;
      for (double p : points) {
        value.push_back(gelu.value(p));
        grad.push_back(gelu.grad(p));
      }
      EXPECT_TRUE(all_close(to_host(be(), y), reference(value, shape), tolerance_for(dtype)));
      EXPECT_TRUE(all_close(to_host(be(), dx), reference(grad, shape), tolerance_for(dtype)));
    }
  }
}

// ---- SwiGLU --------------------------------------------------------------------------------

TEST_P(ElementwiseTest, SwigluForwardBackwardMatchReference) {
  const Shape gate_shapes[] = {{1}, {1, 1}, {4, 3}, {2, 3, 33}, {3, 500}};  // (..., F)
  for (DType dtype : kFloatTypes) {
    for (const Shape& out_shape : gate_shapes) {
      for (Layout layout : kAllLayouts) {
        SCOPED_TRACE(describe(dtype, out_shape, layout));
        const std::int64_t f = last(out_shape);
        Shape in_shape = out_shape;
        in_shape.back() = 2 * f;
        Tensor x = random_on(be(), in_shape, dtype, 8, layout, -6.0f, 6.0f);
        Tensor dy = random_on(be(), out_shape, dtype, 9, layout);
        Tensor y = make_tensor(be(), out_shape, dtype, layout);
        Tensor dx = make_tensor(be(), in_shape, dtype, layout);
        be().swiglu_forward(x, y);
        be().swiglu_backward(dy, x, dx);
        const auto xv = host_values(be(), x), gv = host_values(be(), dy);
        std::vector<double> value(gv.size()), grad(xv.size());
        for (std::size_t r = 0; r < gv.size() / f; ++r) {
          for (std::int64_t j = 0; j < f; ++j) {
            const double gate = xv[r * 2 * f + j], up = xv[r * 2 * f + f + j], g = gv[r * f + j];
            const double s = sigmoid_ref(gate);
            value[r * f + j] = gate * s * up;
            grad[r * 2 * f + j] = g * up * s * (1 + gate * (1 - s));
            grad[r * 2 * f + f + j] = g * gate * s;
          }
        }
        EXPECT_TRUE(all_close(to_host(be(), y), reference(value, out_shape), tolerance_for(dtype)));
        EXPECT_TRUE(all_close(to_host(be(), dx), reference(grad, in_shape), tolerance_for(dtype)));
      }
    }
  }
}

// ---- dropout -------------------------------------------------------------------------------

// Reference: element i (logical order) kept iff philox_uniform_at(seed, offset, i) >= p.
std::vector<double> dropout_ref(const std::vector<double>& x, float p, std::uint64_t seed,
                                std::uint64_t offset) {
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool keep = philox_uniform_at(seed, offset, i) >= p;
    y[i] = keep ? x[i] / (1.0 - p) : 0.0;
  }
  return y;
}

TEST_P(ElementwiseTest, DropoutMaskIsRegeneratedFromSeedAndOffset) {
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : kAllLayouts) {
        SCOPED_TRACE(describe(dtype, shape, layout));
        Tensor x = random_on(be(), shape, dtype, 10, layout);
        Tensor dy = random_on(be(), shape, dtype, 11, Layout::contiguous);
        Tensor y = make_tensor(be(), shape, dtype, layout);
        Tensor dx = make_tensor(be(), shape, dtype, layout);
        be().dropout_forward(x, 0.3f, 1234, 77, y);
        be().dropout_backward(dy, 0.3f, 1234, 77, dx);
        const auto xv = host_values(be(), x), gv = host_values(be(), dy);
        EXPECT_TRUE(all_close(to_host(be(), y), reference(dropout_ref(xv, 0.3f, 1234, 77), shape),
                              tolerance_for(dtype)));
        EXPECT_TRUE(all_close(to_host(be(), dx), reference(dropout_ref(gv, 0.3f, 1234, 77), shape),
                              tolerance_for(dtype)));
      }
    }
  }
}

TEST_P(ElementwiseTest, DropoutEdgeProbabilitiesAndOffsets) {
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape{3, 101};
    Tensor x = random_on(be(), shape, dtype, 12);
    Tensor y = empty(shape, dtype);
    be().dropout_forward(x, 0.0f, 5, 0, y);
    EXPECT_TRUE(bitwise_equal(to_host(be(), y), to_host(be(), x))) << "p = 0 is the identity";
    be().dropout_forward(x, 1.0f, 5, 0, y);
    for (double v : host_values(be(), y))
      ASSERT_EQ(v, 0.0) << "p = 1 drops everything";

    // Rows 1.. of a tensor use stream indices offset + 101.. : the same as those rows alone.
    be().dropout_forward(x, 0.5f, 5, 1000, y);
    Tensor tail = x.slice(0, 1, 2), tail_y = empty({2, 101}, dtype);
    be().dropout_forward(tail, 0.5f, 5, 1000 + 101, tail_y);
    EXPECT_TRUE(bitwise_equal(to_host(be(), tail_y), to_host(be(), y.slice(0, 1, 2))));

    // Another seed gives another mask.
    Tensor other = empty(shape, dtype);
    be().dropout_forward(x, 0.5f, 6, 1000, other);
    EXPECT_FALSE(bitwise_equal(to_host(be(), other), to_host(be(), y)));
  }
}

TEST_P(ElementwiseTest, DropoutKeepRateAndScale) {
  const std::int64_t n = 1 << 20;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE(p);
    Tensor ones = filled_on(be(), {n}, DType::f32, 1.0);
    Tensor y = empty({n}, DType::f32), dx = empty({n}, DType::f32);
    be().dropout_forward(ones, p, 42, 0, y);
    be().dropout_backward(ones, p, 42, 0, dx);
    EXPECT_TRUE(bitwise_equal(to_host(be(), dx), to_host(be(), y))) << "backward = forward mask";
    const float scale = 1.0f / (1.0f - p);
    std::int64_t kept = 0;
    for (double v : host_values(be(), y)) {
      ASSERT_TRUE(v == 0.0 || v == static_cast<double>(scale)) << v;
      kept += v != 0.0;
    }
    const double expected = static_cast<double>(n) * (1.0 - p);
    const double sd = std::sqrt(static_cast<double>(n) * p * (1.0 - p));
    EXPECT_NEAR(static_cast<double>(kept), expected, 5 * sd);
  }
}

// ---- determinism ---------------------------------------------------------------------------

TEST_P(ElementwiseTest, BitwiseDeterministicAcrossRunsAndThreads) {
  const Shape shape{257, 1000}, bias_shape{1000}, half_shape{257, 500};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_on(be(), shape, dtype, 13, Layout::contiguous, -4.0f, 4.0f);
    Tensor g = random_on(be(), shape, dtype, 14);
    Tensor g_half = random_on(be(), half_shape, dtype, 15);
    Tensor bias = random_on(be(), bias_shape, dtype, 16);
    expect_deterministic([&] {
      std::vector<Tensor> out;
      auto fresh = [&](const Shape& s) { return empty(s, dtype); };
      Tensor y = fresh(shape), db = fresh(bias_shape), sum = fresh(shape), acc = fresh(shape);
      be().copy(x, acc);
      be().bias_add(x, bias, y);
      be().bias_grad(g, db, false);
      be().add(x, g, sum);
      be().axpy(0.7, g, acc);
      be().scale(acc, 1.3);
      for (Tensor* t : {&y, &db, &sum, &acc})
        out.push_back(to_host(be(), *t));
      for (auto approx : {GeluApproximation::none, GeluApproximation::tanh}) {
        Tensor gy = fresh(shape), gdx = fresh(shape);
        be().gelu_forward(x, gy, approx);
        be().gelu_backward(g, x, gdx, approx);
        out.push_back(to_host(be(), gy));
        out.push_back(to_host(be(), gdx));
      }
      Tensor sy = fresh(half_shape), sdx = fresh(shape), dy = fresh(shape), ddx = fresh(shape);
      be().swiglu_forward(x, sy);
      be().swiglu_backward(g_half, x, sdx);
      be().dropout_forward(x, 0.2f, 9, 3, dy);
      be().dropout_backward(g, 0.2f, 9, 3, ddx);
      for (Tensor* t : {&sy, &sdx, &dy, &ddx})
        out.push_back(to_host(be(), *t));
      return out;
    });
  }
}

// ---- argument errors -----------------------------------------------------------------------

TEST_P(ElementwiseTest, BadArgumentsNameTheOpAndArgument) {
  Tensor x = filled_on(be(), {4, 33}, DType::f32, 1.0);
  Tensor y = empty({4, 33}, DType::f32);
  Tensor wrong_bias = empty({34}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().bias_add(x, wrong_bias, y); },
                           {"bias_add", "bias must have shape [33]", "float32[34]"}));
  Tensor ints = empty({4, 33}, DType::i32);
  EXPECT_TRUE(throws_error([&] { be().gelu_forward(ints, y, GeluApproximation::none); },
                           {"gelu_forward", "x must be float32 or float64", "int32[4, 33]"}));
  Tensor doubles = empty({4, 33}, DType::f64);
  EXPECT_TRUE(throws_error([&] { be().add(x, x, doubles); },
                           {"add", "y", "float64[4, 33]", "must have the dtype of a"}));
  Tensor other_shape = empty({4, 32}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().axpy(1.0, x, other_shape); },
                           {"axpy", "y", "[4, 32]", "must have the shape of x", "[4, 33]"}));
  EXPECT_TRUE(throws_error([&] { be().swiglu_forward(x, y); },
                           {"swiglu_forward", "must be even", "[4, 33]"}));
  Tensor even = empty({4, 34}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().swiglu_forward(even, y); },
                           {"swiglu_forward", "y must have shape [4, 17]", "[4, 33]"}));
  EXPECT_TRUE(throws_error([&] { be().dropout_forward(x, 1.5f, 0, 0, y); },
                           {"dropout_forward", "p must be in [0, 1]"}));
  Tensor dbias = empty({33}, DType::f64);
  EXPECT_TRUE(throws_error([&] { be().bias_grad(x, dbias, false); },
                           {"bias_grad", "dbias", "must have the dtype of dy"}));
}

// ---- the vectorisable exp behind softmax, GeLU-tanh and SiLU on the CPU ---------------------

TEST(ElementwiseMath, ExpPolyIsWithinAFewUlpOfExp) {
  double worst = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.001953125f * 7) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(static_cast<double>(math::exp_poly(x)) - exact) / exact);
  }
  EXPECT_LT(worst, 2e-7) << "under 2 ulp of float";
  EXPECT_EQ(math::exp_poly(0.0f), 1.0f);
  EXPECT_EQ(math::exp_poly(-88.0f), 0.0f) << "below the normal range flushes to 0";
  EXPECT_EQ(math::exp_poly(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(math::exp_poly(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(math::exp_poly(std::numeric_limits<float>::quiet_NaN())));
}

// ---- fp64 finite-difference gradients (CPU) ------------------------------------------------

Tensor host_random(const Shape& shape, std::uint64_t seed, float low = -1.0f, float high = 1.0f) {
  return random_tensor(shape, DType::f64, seed, low, high);
}

TEST(ElementwiseGradients, BiasAddAndBiasGrad) {
  Tensor x = host_random({5, 7}, 1), bias = host_random({7}, 2), w = host_random({5, 7}, 3);
  auto loss = [&] {
    Tensor y = Tensor::empty({5, 7}, DType::f64);
    host().bias_add(x, bias, y);
    return weighted_sum(y, w);
  };
  Tensor dbias = Tensor::empty({7}, DType::f64);
  host().bias_grad(w, dbias, false);
  EXPECT_TRUE(gradient_matches(loss, bias, dbias));
  EXPECT_TRUE(gradient_matches(loss, x, w));
}

TEST(ElementwiseGradients, Gelu) {
  for (auto approx : {GeluApproximation::none, GeluApproximation::tanh}) {
    Tensor x = host_random({6, 11}, 4, -5.0f, 5.0f), w = host_random({6, 11}, 5);
    auto loss = [&] {
      Tensor y = Tensor::empty(x.shape(), DType::f64);
      host().gelu_forward(x, y, approx);
      return weighted_sum(y, w);
    };
    Tensor dx = Tensor::empty(x.shape(), DType::f64);
    host().gelu_backward(w, x, dx, approx);
    EXPECT_TRUE(gradient_matches(loss, x, dx, 1e-6, 66)) << (approx == GeluApproximation::tanh);
  }
}

TEST(ElementwiseGradients, Tanh) {
  Tensor x = host_random({6, 11}, 14, -4.0f, 4.0f), w = host_random({6, 11}, 15);
  auto loss = [&] {
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    host().tanh_forward(x, y);
    return weighted_sum(y, w);
  };
  Tensor y = Tensor::empty(x.shape(), DType::f64), dx = Tensor::empty(x.shape(), DType::f64);
  host().tanh_forward(x, y);
  host().tanh_backward(w, y, dx);
  EXPECT_TRUE(gradient_matches(loss, x, dx));
}

TEST(ElementwiseGradients, Swiglu) {
  Tensor x = host_random({4, 2 * 9}, 6, -5.0f, 5.0f), w = host_random({4, 9}, 7);
  auto loss = [&] {
    Tensor y = Tensor::empty({4, 9}, DType::f64);
    host().swiglu_forward(x, y);
    return weighted_sum(y, w);
  };
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  host().swiglu_backward(w, x, dx);
  EXPECT_TRUE(gradient_matches(loss, x, dx, 1e-6, 72));
}

TEST(ElementwiseGradients, Dropout) {
  Tensor x = host_random({8, 13}, 8), w = host_random({8, 13}, 9);
  auto loss = [&] {
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    host().dropout_forward(x, 0.4f, 77, 5, y);
    return weighted_sum(y, w);
  };
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  host().dropout_backward(w, 0.4f, 77, 5, dx);
  EXPECT_TRUE(gradient_matches(loss, x, dx, 1e-6, 104));
}

}  // namespace
}  // namespace megatron::testing
