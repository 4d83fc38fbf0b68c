// Conformance of rotary_forward/backward: fp64 reference, partial and full rotary dimensions,
// permuted and padded views, in-place use, finite-difference gradients and determinism.
#include <vector>

#include "backend_test_util.h"

namespace megatron::testing {
namespace {

struct RotaryShape {
  std::int64_t batch, seq, heads, head_dim, rotary_dim;
};

// Straightforward fp64 rotate-half on logical (B, S, H, D) values; `transpose` applies the
// transposed rotation (the gradient), written out independently of the forward formula.
Tensor rotary_reference(const Tensor& x, const Tensor& cos, const Tensor& sin, bool transpose) {
  const auto xs = x.to_vector<double>();
  const auto c = cos.to_vector<double>();
  const auto s = sin.to_vector<double>();
  const std::int64_t S = x.size(1), H = x.size(2), D = x.size(3), R = cos.size(1), half = R / 2;
  std::vector<double> y(xs.size());
  for (std::int64_t row = 0; row < x.numel() / D; ++row) {
    const std::int64_t pos = (row / H) % S;
    const std::int64_t base = row * D;
    for (std::int64_t i = 0; i < D; ++i) {
      double v = xs[base + i];
      if (i < R) {
        // Pair partner and the sign of the sin term for element i.
        const std::int64_t partner = i < half ? i + half : i - half;
        const double sign = i < half ? -1.0 : 1.0;
        if (!transpose) {
          v = xs[base + i] * c[pos * R + i] + sign * xs[base + partner] * s[pos * R + i];
        } else {
          // d y_partner / d x_i = -sign * sin[partner]: the sin of the partner's position.
          v = xs[base + i] * c[pos * R + i] - sign * xs[base + partner] * s[pos * R + partner];
        }
      }
      y[static_cast<std::size_t>(base + i)] = v;
    }
  }
  return Tensor::from(y, x.shape());
}

class RotaryTest : public BackendTest {
 protected:
  // Random cos/sin tables (the two halves differ, so using the wrong half is caught).
  void make_tables(std::int64_t seq, std::int64_t rotary_dim, DType dtype, std::uint64_t seed) {
    cos_host = random_tensor({seq, rotary_dim}, dtype, seed);
    sin_host = random_tensor({seq, rotary_dim}, dtype, seed + 1);
    cos = upload(cos_host);
    sin = upload(sin_host);
  }
  Tensor cos_host, sin_host, cos, sin;
};

TEST_P(RotaryTest, ForwardAndBackwardMatchReference) {
  const std::vector<RotaryShape> shapes = {
      {3, 5, 7, 8, 4},    // partial rotary, odd batch and heads
      {1, 1, 3, 6, 6},    // S = 1, R == D
      {2, 4, 1, 10, 10},  // one head
      {3, 1, 5, 16, 8},   // S = 1, R < D
      {1, 3, 2, 5, 2},    // odd head dimension
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const auto& sh : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " D=" + std::to_string(sh.head_dim) +
                   " R=" + std::to_string(sh.rotary_dim));
      make_tables(sh.seq, sh.rotary_dim, dtype, 11);
      const Tensor x_host = random_tensor({sh.batch, sh.seq, sh.heads, sh.head_dim}, dtype, 3);
      const Tensor x = upload(x_host);
      Tensor y = empty(x.shape(), dtype);
      be().rotary_forward(x, cos, sin, y);
      EXPECT_TRUE(all_close(download(y), rotary_reference(x_host, cos_host, sin_host, false),
                            tolerance_for(dtype)));
      Tensor dx = empty(x.shape(), dtype);
      be().rotary_backward(x, cos, sin, dx);
      EXPECT_TRUE(all_close(download(dx), rotary_reference(x_host, cos_host, sin_host, true),
                            tolerance_for(dtype)));
    }
  }
}

// Megatron's (S, B, H, D) activations are passed as permuted views, and heads may be slices of
// a wider fused buffer (row stride > D); outputs may be views too.
TEST_P(RotaryTest, PermutedAndPaddedViews) {
  const std::int64_t B = 3, S = 5, H = 3, D = 12, R = 8;
  make_tables(S, R, DType::f32, 21);
  const Tensor sbhd_host = random_tensor({S, B, H, D + 4}, DType::f32, 5);
  const Tensor x = upload(sbhd_host).slice(3, 2, D).permute({1, 0, 2, 3});
  const Tensor x_logical = download(x);  // contiguous (B, S, H, D) copy of the same values
  const Tensor expected = rotary_reference(x_logical, cos_host, sin_host, false);

  Tensor y_sbhd = empty({S, B, H, D}, DType::f32);
  Tensor y = y_sbhd.permute({1, 0, 2, 3});
  be().rotary_forward(x, cos, sin, y);
  EXPECT_TRUE(all_close(download(y), expected, tolerance_for(DType::f32)));

  Tensor y_contiguous = empty({B, S, H, D}, DType::f32);
  be().rotary_forward(x, cos, sin, y_contiguous);
  EXPECT_TRUE(bitwise_equal(download(y_contiguous), download(y)));

  // cos/sin rows may be strided too (a slice of a longer table).
  const Tensor wide_cos = upload(random_tensor({S, R + 6}, DType::f32, 31));
  const Tensor wide_sin = upload(random_tensor({S, R + 6}, DType::f32, 32));
  const Tensor cos_view = wide_cos.slice(1, 0, R), sin_view = wide_sin.slice(1, 0, R);
  be().rotary_forward(x, cos_view, sin_view, y);
  EXPECT_TRUE(all_close(download(y),
                        rotary_reference(x_logical, download(cos_view), download(sin_view), false),
                        tolerance_for(DType::f32)));
}

TEST_P(RotaryTest, InPlaceMatchesOutOfPlace) {
  const std::int64_t B = 2, S = 7, H = 3, D = 10, R = 6;
  make_tables(S, R, DType::f32, 41);
  const Tensor x_host = random_tensor({S, B, H, D}, DType::f32, 7);
  const Tensor x = upload(x_host).permute({1, 0, 2, 3});
  Tensor expected = empty(x.shape(), DType::f32);
  be().rotary_forward(x, cos, sin, expected);
  Tensor in_place = upload(x_host).permute({1, 0, 2, 3});
  be().rotary_forward(in_place, cos, sin, in_place);
  EXPECT_TRUE(bitwise_equal(download(in_place), download(expected)));

  be().rotary_backward(x, cos, sin, expected);
  Tensor grad_in_place = upload(x_host).permute({1, 0, 2, 3});
  be().rotary_backward(grad_in_place, cos, sin, grad_in_place);
  EXPECT_TRUE(bitwise_equal(download(grad_in_place), download(expected)));
}

// rotary_backward(dy) must be the gradient of sum(rotary_forward(x) * dy) with respect to x.
TEST_P(RotaryTest, BackwardMatchesFiniteDifferences) {
  if (GetParam() != "cpu") GTEST_SKIP() << "finite differences run on the fp64 CPU backend";
  for (std::int64_t rotary_dim : {4, 8}) {
    const std::int64_t B = 2, S = 3, H = 3, D = 8;
    make_tables(S, rotary_dim, DType::f64, 51);
    Tensor x = random_tensor({B, S, H, D}, DType::f64, 9);
    const Tensor dy = random_tensor({B, S, H, D}, DType::f64, 10);
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    auto loss = [&] {
      be().rotary_forward(x, cos, sin, y);
      return weighted_sum(y, dy);
    };
    Tensor dx = Tensor::empty(x.shape(), DType::f64);
    be().rotary_backward(dy, cos, sin, dx);
    EXPECT_TRUE(gradient_matches(loss, x, dx, 1e-7, x.numel()));
  }
}

TEST_P(RotaryTest, DeterministicAcrossRunsAndThreads) {
  const std::int64_t B = 4, S = 64, H = 8, D = 64, R = 32;
  make_tables(S, R, DType::f32, 61);
  const Tensor x = upload(random_tensor({B, S, H, D}, DType::f32, 12));
  auto run = [&](int threads, bool backward) {
    ScopedThreads scoped(threads);
    Tensor y = empty(x.shape(), DType::f32);
    if (backward) {
      be().rotary_backward(x, cos, sin, y);
    } else {
      be().rotary_forward(x, cos, sin, y);
    }
    return download(y);
  };
  for (bool backward : {false, true}) {
    const Tensor one = run(1, backward);
    EXPECT_TRUE(bitwise_equal(one, run(1, backward)));
    EXPECT_TRUE(bitwise_equal(one, run(2, backward)));
    EXPECT_TRUE(bitwise_equal(run(2, backward), run(2, backward)));
  }
}

TEST_P(RotaryTest, RejectsBadArguments) {
  const Tensor x = empty({2, 3, 4, 8}, DType::f32);
  Tensor y = empty({2, 3, 4, 8}, DType::f32);
  auto expect_error = [&](const Tensor& c, const Tensor& s, Tensor& out, const char* fragment) {
    try {
      be().rotary_forward(x, c, s, out);
      ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("rotary_forward"), std::string::npos) << message;
      EXPECT_NE(message.find(fragment), std::string::npos) << message;
    }
  };
  const Tensor odd = empty({3, 5}, DType::f32);
  expect_error(odd, odd, y, "even");
  const Tensor too_wide = empty({3, 10}, DType::f32);
  expect_error(too_wide, too_wide, y, "at most the head dimension");
  const Tensor wrong_rows = empty({4, 4}, DType::f32);
  expect_error(wrong_rows, wrong_rows, y, "rows");
  const Tensor f64_table = empty({3, 4}, DType::f64);
  expect_error(f64_table, f64_table, y, "dtype");
  const Tensor table = empty({3, 4}, DType::f32);
  Tensor wrong_out = empty({2, 3, 4, 6}, DType::f32);
  expect_error(table, table, wrong_out, "shape");
}

MEGATRON_INSTANTIATE_BACKENDS(RotaryTest);

}  // namespace
}  // namespace megatron::testing
