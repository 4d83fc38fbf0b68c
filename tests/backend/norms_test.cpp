// LayerNorm and RMSNorm: conformance against naive fp64 references over awkward shapes and strided
// views, parameter-gradient accumulation, fp64 finite-difference gradients, determinism across
// runs and thread counts, and argument errors.
#include <cmath>

#include "row_ops_test_util.h"

namespace megatron::testing {
namespace {

using NormsTest = BackendTest;
MEGATRON_INSTANTIATE_BACKENDS(NormsTest);

constexpr float kEps = 1e-5f;
const Shape kShapes[] = {{1}, {1, 1}, {3, 1}, {1, 3}, {5, 33}, {2, 3, 100}, {7, 1000}};

std::string describe(DType dtype, const Shape& shape, Layout layout) {
  return std::string(dtype_name(dtype)) + " " + shape_str(shape) + " " + layout_name(layout);
}

Layout vector_layout(Layout layout) {
  return layout == Layout::contiguous ? Layout::contiguous : Layout::strided_last;
}

// Saved statistics: shape [rows], or x's leading dimensions (both are accepted).
Shape stats_shape(const Shape& x_shape, bool leading) {
  if (leading) return Shape(x_shape.begin(), x_shape.end() - 1);
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < x_shape.size(); ++d)
    rows *= x_shape[d];
  return {rows};
}

// ---- fp64 references -----------------------------------------------------------------------

struct NormReference {
  std::vector<double> y, mean, rstd;       // forward
  std::vector<double> dx, dweight, dbias;  // backward
};

// LayerNorm (rms = false) or RMSNorm (rms = true) over rows of length n, from the definitions;
// gradients by differentiating y = xhat * w (+ b) with xhat = (x - mean) * rstd (mean = 0 for RMS).
NormReference norm_reference(bool rms, const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>* b, const std::vector<double>& dy,
                             std::int64_t n) {
  const std::size_t rows = x.size() / static_cast<std::size_t>(n);
  NormReference ref;
  ref.y.resize(x.size());
  ref.dx.resize(x.size());
  ref.dweight.assign(static_cast<std::size_t>(n), 0.0);
  ref.dbias.assign(static_cast<std::size_t>(n), 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * n;
    double mean = 0, var = 0;
    if (!rms) {
      for (std::int64_t j = 0; j < n; ++j)
        mean += xr[j];
      mean /= static_cast<double>(n);
    }
    for (std::int64_t j = 0; j < n; ++j)
      var += (xr[j] - mean) * (xr[j] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + static_cast<double>(kEps));
    ref.mean.push_back(mean);
    ref.rstd.push_back(rstd);
    // dL/dxhat_j = dy_j w_j; dxhat_j/dx_k = rstd (delta_jk - [!rms] / n - xhat_j xhat_k / n).
    double sum_g = 0, sum_g_xhat = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      const double xhat = (xr[j] - mean) * rstd, g = dy[r * n + j] * w[j];
      ref.y[r * n + j] = xhat * w[j] + (b ? (*b)[j] : 0.0);
      sum_g += g;
      sum_g_xhat += g * xhat;
      ref.dweight[j] += dy[r * n + j] * xhat;
      ref.dbias[j] += dy[r * n + j];
    }
    for (std::int64_t k = 0; k < n; ++k) {
      const double xhat = (xr[k] - mean) * rstd;
      const double centred = rms ? 0.0 : sum_g / static_cast<double>(n);
      ref.dx[r * n + k] =
          rstd * (dy[r * n + k] * w[k] - centred - xhat * sum_g_xhat / static_cast<double>(n));
    }
  }
  return ref;
}

// Reductions over N (per row) or over rows (parameter gradients) round more in f32.
Tolerance reduction_tolerance(DType dtype, std::int64_t terms) {
  Tolerance tol = tolerance_for(dtype);
  tol.atol *= std::max(1.0, std::sqrt(static_cast<double>(terms)));
  return tol;
}

// ---- conformance ---------------------------------------------------------------------------

void check_norm(Backend& be, bool rms, bool with_bias, DType dtype, const Shape& shape,
                Layout layout, float x_low, float x_high) {
  const std::int64_t n = shape.back();
  const bool leading_stats = layout == Layout::padded_rows;
  const Shape stats = stats_shape(shape, leading_stats);
  const std::int64_t rows = shape_numel(shape) / n;
  Tensor x = random_on(be, shape, dtype, 21, layout, x_low, x_high);
  Tensor weight = random_on(be, {n}, dtype, 22, vector_layout(layout), 0.5f, 1.5f);
  Tensor bias = random_on(be, {n}, dtype, 23, vector_layout(layout));
  Tensor dy = random_on(be, shape, dtype, 24, layout);
  Tensor y = make_tensor(be, shape, dtype, layout);
  Tensor mean = Tensor::empty(stats, dtype, be.device()),
         rstd = Tensor::empty(stats, dtype, be.device());
  Tensor dx = make_tensor(be, shape, dtype, layout);
  Tensor dweight = filled_on(be, {n}, dtype, 99.0, vector_layout(layout));
  Tensor dbias = filled_on(be, {n}, dtype, 99.0, vector_layout(layout));
  if (rms) {
    be.rmsnorm_forward(x, weight, kEps, y, rstd);
    be.rmsnorm_backward(dy, x, weight, rstd, dx, dweight, false);
  } else {
    be.layernorm_forward(x, weight, with_bias ? &bias : nullptr, kEps, y, mean, rstd);
    be.layernorm_backward(dy, x, weight, mean, rstd, dx, dweight, with_bias ? &dbias : nullptr,
                          false);
  }
  const auto bv = host_values(be, bias);
  const NormReference ref = norm_reference(rms, host_values(be, x), host_values(be, weight),
                                           with_bias ? &bv : nullptr, host_values(be, dy), n);
  const Tolerance row_tol = reduction_tolerance(dtype, n),
                  col_tol = reduction_tolerance(dtype, rows);
  EXPECT_TRUE(all_close(to_host(be, y), reference(ref.y, shape), tolerance_for(dtype))) << "y";
  EXPECT_TRUE(all_close(to_host(be, rstd), reference(ref.rstd, stats), row_tol)) << "rstd";
  if (!rms) {
    EXPECT_TRUE(all_close(to_host(be, mean), reference(ref.mean, stats), row_tol)) << "mean";
  }
  EXPECT_TRUE(all_close(to_host(be, dx), reference(ref.dx, shape), row_tol)) << "dx";
  EXPECT_TRUE(all_close(to_host(be, dweight), reference(ref.dweight, {n}), col_tol)) << "dweight";
  if (!rms && with_bias) {
    EXPECT_TRUE(all_close(to_host(be, dbias), reference(ref.dbias, {n}), col_tol)) << "dbias";
  }
  if (!rms && !with_bias) {
    for (double v : host_values(be, dbias))
      ASSERT_EQ(v, 99.0) << "null dbias: untouched";
  }
}

TEST_P(NormsTest, LayerNormMatchesReference) {
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : kAllLayouts) {
        for (bool with_bias : {true, false}) {
          SCOPED_TRACE(describe(dtype, shape, layout) + (with_bias ? " bias" : " no bias"));
          check_norm(be(), false, with_bias, dtype, shape, layout, -1.0f, 1.0f);
        }
      }
    }
  }
}

TEST_P(NormsTest, LayerNormIsStableForOffsetInputs) {
  // A mean of 10 against a spread of 1: one-pass E[x^2] - E[x]^2 would lose digits in f32.
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    check_norm(be(), false, true, dtype, {9, 777}, Layout::contiguous, 9.0f, 11.0f);
  }
}

TEST_P(NormsTest, RmsNormMatchesReference) {
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : kAllLayouts) {
        SCOPED_TRACE(describe(dtype, shape, layout));
        check_norm(be(), true, false, dtype, shape, layout, -1.0f, 1.0f);
      }
    }
  }
}

TEST_P(NormsTest, ParameterGradientsAccumulateOrOverwrite) {
  const Shape shape{70, 33};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_on(be(), shape, dtype, 31), dy = random_on(be(), shape, dtype, 32);
    Tensor weight = random_on(be(), {33}, dtype, 33), bias = random_on(be(), {33}, dtype, 34);
    Tensor y = empty(shape, dtype), mean = empty({70}, dtype), rstd = empty({70}, dtype);
    Tensor dx = empty(shape, dtype);
    Tensor rms_rstd = empty({70}, dtype);
    be().layernorm_forward(x, weight, &bias, kEps, y, mean, rstd);
    be().rmsnorm_forward(x, weight, kEps, y, rms_rstd);
    auto run = [&](bool accumulate, double initial, bool rms) {
      Tensor dw = filled_on(be(), {33}, dtype, initial), db = filled_on(be(), {33}, dtype, initial);
      if (rms) {
        be().rmsnorm_backward(dy, x, weight, rms_rstd, dx, dw, accumulate);
      } else {
        be().layernorm_backward(dy, x, weight, mean, rstd, dx, dw, &db, accumulate);
      }
      return std::pair{host_values(be(), dw), host_values(be(), db)};
    };
    for (bool rms : {false, true}) {
      const auto [fresh_w, fresh_b] = run(false, 7.0, rms);
      const auto [acc_w, acc_b] = run(true, 0.5, rms);
      for (std::size_t j = 0; j < fresh_w.size(); ++j) {
        // Accumulation adds the fresh gradient to the old value in the tensor's dtype.
        const double want_w = dtype == DType::f32
                                  ? static_cast<double>(0.5f + static_cast<float>(fresh_w[j]))
                                  : 0.5 + fresh_w[j];
        EXPECT_EQ(acc_w[j], want_w) << "dweight " << j << (rms ? " rms" : "");
        if (!rms) {
          const double want_b = dtype == DType::f32
                                    ? static_cast<double>(0.5f + static_cast<float>(fresh_b[j]))
                                    : 0.5 + fresh_b[j];
          EXPECT_EQ(acc_b[j], want_b) << "dbias " << j;
        }
      }
    }
  }
}

// ---- determinism ---------------------------------------------------------------------------

TEST_P(NormsTest, BitwiseDeterministicAcrossRunsAndThreads) {
  const Shape shape{257, 1000};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_on(be(), shape, dtype, 41), dy = random_on(be(), shape, dtype, 42);
    Tensor weight = random_on(be(), {1000}, dtype, 43), bias = random_on(be(), {1000}, dtype, 44);
    expect_deterministic([&] {
      Tensor y = empty(shape, dtype), mean = empty({257}, dtype), rstd = empty({257}, dtype);
      Tensor dx = empty(shape, dtype), dw = empty({1000}, dtype), db = empty({1000}, dtype);
      Tensor ry = empty(shape, dtype), rrstd = empty({257}, dtype), rdx = empty(shape, dtype);
      Tensor rdw = empty({1000}, dtype);
      be().layernorm_forward(x, weight, &bias, kEps, y, mean, rstd);
      be().layernorm_backward(dy, x, weight, mean, rstd, dx, dw, &db, false);
      be().rmsnorm_forward(x, weight, kEps, ry, rrstd);
      be().rmsnorm_backward(dy, x, weight, rrstd, rdx, rdw, false);
      std::vector<Tensor> out;
      for (Tensor* t : {&y, &mean, &rstd, &dx, &dw, &db, &ry, &rrstd, &rdx, &rdw}) {
        out.push_back(to_host(be(), *t));
      }
      return out;
    });
  }
}

// ---- argument errors -----------------------------------------------------------------------

TEST_P(NormsTest, BadArgumentsNameTheOpAndArgument) {
  Tensor x = filled_on(be(), {4, 33}, DType::f32, 1.0), y = empty({4, 33}, DType::f32);
  Tensor w = filled_on(be(), {33}, DType::f32, 1.0), stats = empty({4}, DType::f32);
  Tensor w32 = empty({32}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().layernorm_forward(x, w32, nullptr, kEps, y, stats, stats); },
                           {"layernorm_forward", "weight must have shape [33]", "float32[32]"}));
  Tensor stats5 = empty({5}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().layernorm_forward(x, w, nullptr, kEps, y, stats5, stats); },
                           {"layernorm_forward", "mean must have shape [4]", "float32[5]"}));
  Tensor x3 = filled_on(be(), {2, 3, 33}, DType::f32, 1.0), y3 = empty({2, 3, 33}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().rmsnorm_forward(x3, w, kEps, y3, stats5); },
                           {"rmsnorm_forward", "rstd must have shape [6] or [2, 3]"}));
  Tensor stats64 = empty({4}, DType::f64);
  EXPECT_TRUE(throws_error([&] { be().layernorm_forward(x, w, nullptr, kEps, y, stats, stats64); },
                           {"layernorm_forward", "rstd", "must have the dtype of x"}));
  Tensor ints = empty({4, 33}, DType::i32);
  EXPECT_TRUE(throws_error([&] { be().rmsnorm_forward(ints, w, kEps, y, stats); },
                           {"rmsnorm_forward", "x must be float32 or float64", "int32"}));
  Tensor dx_wrong = empty({4, 34}, DType::f32), dw = empty({33}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] { be().layernorm_backward(y, x, w, stats, stats, dx_wrong, dw, nullptr, false); },
      {"layernorm_backward", "dx", "[4, 34]", "must have the shape of x"}));
  EXPECT_TRUE(throws_error([&] { be().rmsnorm_backward(y, x, w, stats, x, w32, false); },
                           {"rmsnorm_backward", "dweight must have shape [33]"}));
}

// ---- fp64 finite-difference gradients (CPU) ------------------------------------------------

TEST(NormGradients, LayerNormInputWeightAndBias) {
  const Shape shape{4, 9};
  Tensor x = random_tensor(shape, DType::f64, 1, -2.0f, 2.0f);
  Tensor w = random_tensor({9}, DType::f64, 2, 0.5f, 1.5f), b = random_tensor({9}, DType::f64, 3);
  Tensor loss_weights = random_tensor(shape, DType::f64, 4);
  Tensor mean = Tensor::empty({4}, DType::f64), rstd = Tensor::empty({4}, DType::f64);
  auto loss = [&] {
    Tensor y = Tensor::empty(shape, DType::f64);
    host().layernorm_forward(x, w, &b, kEps, y, mean, rstd);
    return weighted_sum(y, loss_weights);
  };
  loss();  // saves mean and rstd at the unperturbed point
  Tensor dx = Tensor::empty(shape, DType::f64), dw = Tensor::empty({9}, DType::f64);
  Tensor db = Tensor::empty({9}, DType::f64);
  host().layernorm_backward(loss_weights, x, w, mean, rstd, dx, dw, &db, false);
  EXPECT_TRUE(gradient_matches(loss, x, dx)) << "dx";
  EXPECT_TRUE(gradient_matches(loss, w, dw)) << "dweight";
  EXPECT_TRUE(gradient_matches(loss, b, db)) << "dbias";
}

TEST(NormGradients, RmsNormInputAndWeight) {
  const Shape shape{3, 2, 7};
  Tensor x = random_tensor(shape, DType::f64, 5, -2.0f, 2.0f);
  Tensor w = random_tensor({7}, DType::f64, 6, 0.5f, 1.5f);
  Tensor loss_weights = random_tensor(shape, DType::f64, 7);
  Tensor rstd = Tensor::empty({3, 2}, DType::f64);
  auto loss = [&] {
    Tensor y = Tensor::empty(shape, DType::f64);
    host().rmsnorm_forward(x, w, kEps, y, rstd);
    return weighted_sum(y, loss_weights);
  };
  loss();
  Tensor dx = Tensor::empty(shape, DType::f64), dw = Tensor::empty({7}, DType::f64);
  host().rmsnorm_backward(loss_weights, x, w, rstd, dx, dw, false);
  EXPECT_TRUE(gradient_matches(loss, x, dx)) << "dx";
  EXPECT_TRUE(gradient_matches(loss, w, dw)) << "dweight";
}

}  // namespace
}  // namespace megatron::testing
