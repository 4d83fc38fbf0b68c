// Scaled masked softmax: conformance against a naive fp64 reference (causal bottom-right masks,
// padding masks per batch or broadcast, fully masked rows, strided and permuted views), fp64
// finite-difference gradients, determinism across runs and thread counts, and argument errors.
#include <cmath>
#include <limits>

#include "row_ops_test_util.h"

namespace megatron::testing {
namespace {

using SoftmaxTest = BackendTest;
MEGATRON_INSTANTIATE_BACKENDS(SoftmaxTest);

enum class MaskKind { none, per_batch, broadcast };

struct Case {
  Shape shape;  // (B, H, Sq, Sk)
  bool causal;
  MaskKind mask;
  float scale;
  float range;  // x uniform in [-range, range]
};

const Case kCases[] = {
    {{1, 1, 1, 1}, false, MaskKind::none, 1.0f, 3.0f},
    {{1, 1, 1, 1}, true, MaskKind::none, 1.0f, 3.0f},
    {{2, 3, 5, 7}, true, MaskKind::none, 0.125f, 20.0f},  // Sq < Sk: every row sees 3 + i keys
    {{1, 2, 7, 5}, true, MaskKind::none, 1.0f, 3.0f},     // Sq > Sk: rows 0, 1 fully masked
    {{2, 2, 6, 33}, false, MaskKind::per_batch, 0.5f, 3.0f},
    {{3, 1, 4, 1000}, true, MaskKind::broadcast, 1.0f, 3.0f},
    {{3, 1, 4, 1000}, false, MaskKind::none, 1.0f, 100.0f},  // exp(100) overflows without the max
    {{1, 12, 16, 16}, true, MaskKind::per_batch, 0.35f, 3.0f},
};

// Padding mask (Bm, 1, Sq, Sk), non-zero = masked: a pseudo-random quarter of the positions, and
// row 1 of batch 0 masked entirely.
Tensor make_mask(std::int64_t batches, std::int64_t sq, std::int64_t sk) {
  std::vector<std::uint8_t> m(static_cast<std::size_t>(batches * sq * sk));
  for (std::size_t i = 0; i < m.size(); ++i)
    m[i] = ((i * 2654435761u) >> 7) % 4 == 0 ? 1 : 0;
  if (sq > 1) {
    for (std::int64_t j = 0; j < sk; ++j)
      m[static_cast<std::size_t>(sk + j)] = 3;
  }
  return Tensor::from(m, {batches, 1, sq, sk});
}

// y = softmax(scale * x) over unmasked keys, 0 at masked keys and on fully masked rows.
std::vector<double> softmax_ref(const std::vector<double>& x, const Shape& s, float scale,
                                bool causal, const Tensor* mask) {
  const std::int64_t batches = s[0], heads = s[1], sq = s[2], sk = s[3];
  const std::vector<std::int64_t> m =
      mask ? mask->to_vector<std::int64_t>() : std::vector<std::int64_t>{};
  std::vector<double> y(x.size(), 0.0);
  for (std::int64_t b = 0; b < batches; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < sq; ++i) {
        const std::int64_t row = ((b * heads + h) * sq + i) * sk;
        const std::int64_t mask_row = ((mask && mask->size(0) > 1 ? b : 0) * sq + i) * sk;
        auto masked = [&](std::int64_t j) {
          return (causal && j > i + (sk - sq)) || (mask && m[mask_row + j] != 0);
        };
        double max = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < sk; ++j) {
          if (!masked(j)) max = std::max(max, scale * x[row + j]);
        }
        if (max == -std::numeric_limits<double>::infinity()) continue;
        double sum = 0;
        for (std::int64_t j = 0; j < sk; ++j) {
          if (!masked(j)) sum += std::exp(scale * x[row + j] - max);
        }
        for (std::int64_t j = 0; j < sk; ++j) {
          if (!masked(j)) y[row + j] = std::exp(scale * x[row + j] - max) / sum;
        }
      }
    }
  }
  return y;
}

// dx = scale * y * (dy - sum_j dy_j y_j) per row of length n.
std::vector<double> softmax_backward_ref(const std::vector<double>& dy,
                                         const std::vector<double>& y, float scale,
                                         std::int64_t n) {
  std::vector<double> dx(y.size());
  for (std::size_t r = 0; r < y.size() / static_cast<std::size_t>(n); ++r) {
    double dot = 0;
    for (std::int64_t j = 0; j < n; ++j)
      dot += dy[r * n + j] * y[r * n + j];
    for (std::int64_t j = 0; j < n; ++j)
      dx[r * n + j] = scale * y[r * n + j] * (dy[r * n + j] - dot);
  }
  return dx;
}

std::string describe(DType dtype, const Case& c, const char* layout) {
  return std::string(dtype_name(dtype)) + " " + shape_str(c.shape) + (c.causal ? " causal" : "") +
         (c.mask == MaskKind::per_batch   ? " mask"
          : c.mask == MaskKind::broadcast ? " mask/1"
                                          : "") +
         " " + layout;
}

// x as a permuted view: stored (B, Sq, H, Sk) like Megatron's activations, viewed (B, H, Sq, Sk).
Tensor permuted_random(Backend& be, const Shape& s, DType dtype, std::uint64_t seed, float low,
                       float high) {
  Tensor stored = Tensor::empty({s[0], s[2], s[1], s[3]}, dtype, be.device());
  be.fill_uniform(stored, low, high, seed, 0);
  return stored.permute({0, 2, 1, 3});
}

TEST_P(SoftmaxTest, ForwardBackwardMatchReference) {
  const char* kLayouts[] = {"contiguous", "padded rows", "strided last dim", "transposed",
                            "permuted"};
  for (DType dtype : kFloatTypes) {
    for (const Case& c : kCases) {
      for (int layout_index = 0; layout_index < 5; ++layout_index) {
        SCOPED_TRACE(describe(dtype, c, kLayouts[layout_index]));
        const Layout layout = layout_index < 4 ? kAllLayouts[layout_index] : Layout::contiguous;
        Tensor x = layout_index < 4 ? random_on(be(), c.shape, dtype, 51, layout, -c.range, c.range)
                                    : permuted_random(be(), c.shape, dtype, 51, -c.range, c.range);
        Tensor dy = random_on(be(), c.shape, dtype, 52, layout);
        Tensor host_mask;
        if (c.mask != MaskKind::none) {
          host_mask =
              make_mask(c.mask == MaskKind::per_batch ? c.shape[0] : 1, c.shape[2], c.shape[3]);
        }
        Tensor mask = host_mask.defined() ? upload(host_mask) : Tensor();
        Tensor y = make_tensor(be(), c.shape, dtype, layout);
        Tensor dx = make_tensor(be(), c.shape, dtype, layout);
        be().softmax_forward(x, mask.defined() ? &mask : nullptr, c.scale, c.causal, y);
        be().softmax_backward(dy, y, c.scale, dx);
        const auto y_ref = softmax_ref(host_values(be(), x), c.shape, c.scale, c.causal,
                                       host_mask.defined() ? &host_mask : nullptr);
        const auto dx_ref = softmax_backward_ref(host_values(be(), dy), y_ref, c.scale, c.shape[3]);
        EXPECT_TRUE(all_close(to_host(be(), y), reference(y_ref, c.shape), tolerance_for(dtype)));
        EXPECT_TRUE(all_close(to_host(be(), dx), reference(dx_ref, c.shape), tolerance_for(dtype)));
      }
    }
  }
}

TEST_P(SoftmaxTest, MaskedPositionsAndFullyMaskedRowsAreExactZeros) {
  const Shape shape{2, 1, 6, 4};  // causal with Sq > Sk: rows 0 and 1 see no key
  Tensor x = random_on(be(), shape, DType::f32, 53, Layout::contiguous, -5.0f, 5.0f);
  Tensor host_mask = make_mask(2, 6, 4);
  Tensor mask = upload(host_mask);
  Tensor y = empty(shape, DType::f32);
  be().softmax_forward(x, &mask, 1.0f, true, y);
  const auto yv = host_values(be(), y);
  const auto mv = host_mask.to_vector<std::int64_t>();
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t i = 0; i < 6; ++i) {
      double row_sum = 0;
      bool any_visible = false;
      for (std::int64_t j = 0; j < 4; ++j) {
        const double v = yv[static_cast<std::size_t>((b * 6 + i) * 4 + j)];
        const bool masked = j > i - 2 || mv[static_cast<std::size_t>((b * 6 + i) * 4 + j)] != 0;
        if (masked) {
          EXPECT_EQ(v, 0.0) << b << "," << i << "," << j;
        }
        any_visible |= !masked;
        row_sum += v;
      }
      EXPECT_NEAR(row_sum, any_visible ? 1.0 : 0.0, 1e-6) << "row " << b << "," << i;
    }
  }
}

TEST_P(SoftmaxTest, BitwiseDeterministicAcrossRunsAndThreads) {
  const Shape shape{1, 2, 257, 1000};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_on(be(), shape, dtype, 54, Layout::contiguous, -8.0f, 8.0f);
    Tensor dy = random_on(be(), shape, dtype, 55);
    Tensor mask = upload(make_mask(1, 257, 1000));
    expect_deterministic([&] {
      Tensor y = empty(shape, dtype), dx = empty(shape, dtype);
      Tensor y2 = empty(shape, dtype), dx2 = empty(shape, dtype);
      be().softmax_forward(x, &mask, 0.125f, true, y);
      be().softmax_backward(dy, y, 0.125f, dx);
      be().softmax_forward(x, nullptr, 1.0f, false, y2);
      be().softmax_backward(dy, y2, 1.0f, dx2);
      return std::vector<Tensor>{to_host(be(), y), to_host(be(), dx), to_host(be(), y2),
                                 to_host(be(), dx2)};
    });
  }
}

TEST_P(SoftmaxTest, BadArgumentsNameTheOpAndArgument) {
  Tensor x = filled_on(be(), {2, 3, 5, 7}, DType::f32, 0.0), y = empty({2, 3, 5, 7}, DType::f32);
  Tensor x3 = empty({3, 5, 7}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().softmax_forward(x3, nullptr, 1.0f, true, x3); },
                           {"softmax_forward", "x must have 4 dimensions", "[3, 5, 7]"}));
  Tensor float_mask = empty({2, 1, 5, 7}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().softmax_forward(x, &float_mask, 1.0f, true, y); },
                           {"softmax_forward", "mask must be uint8", "float32[2, 1, 5, 7]"}));
  Tensor wrong_mask = empty({2, 1, 5, 8}, DType::u8);
  EXPECT_TRUE(
      throws_error([&] { be().softmax_forward(x, &wrong_mask, 1.0f, true, y); },
                   {"softmax_forward", "mask must have shape [2 or 1, 1, 5, 7]", "[2, 1, 5, 8]"}));
  Tensor dx_wrong = empty({2, 3, 5, 6}, DType::f32);
  EXPECT_TRUE(throws_error([&] { be().softmax_backward(y, y, 1.0f, dx_wrong); },
                           {"softmax_backward", "dx", "must have the shape of y"}));
  Tensor y64 = empty({2, 3, 5, 7}, DType::f64);
  EXPECT_TRUE(throws_error([&] { be().softmax_forward(x, nullptr, 1.0f, true, y64); },
                           {"softmax_forward", "y", "must have the dtype of x"}));
}

// ---- fp64 finite-difference gradient (CPU) -------------------------------------------------

TEST(SoftmaxGradients, CausalWithPaddingMask) {
  const Shape shape{2, 2, 5, 6};
  const float scale = 0.7f;
  Tensor x = random_tensor(shape, DType::f64, 56, -3.0f, 3.0f);
  Tensor w = random_tensor(shape, DType::f64, 57);
  Tensor mask = make_mask(2, 5, 6);
  Tensor y = Tensor::empty(shape, DType::f64);
  auto loss = [&] {
    host().softmax_forward(x, &mask, scale, true, y);
    return weighted_sum(y, w);
  };
  loss();
  Tensor dx = Tensor::empty(shape, DType::f64);
  host().softmax_backward(w, y, scale, dx);
  EXPECT_TRUE(gradient_matches(loss, x, dx, 1e-6, 120));
}

}  // namespace
}  // namespace megatron::testing
