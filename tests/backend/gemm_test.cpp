// GEMM conformance: every transpose combination, odd and batched (broadcast) shapes, strided
// views, alpha/beta, f64/bf16/f16, argument errors, determinism, and the gradient identities that
// layers rely on (dA = dC @ B^T, dB = A^T @ dC) against finite differences.
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/blas_capabilities.h"
#include "backend/cpu/gemm_policy.h"
#include "backend_test_util.h"

namespace megatron::testing {
namespace {

struct Dims {
  std::int64_t m, n, k;
};

std::string dims_str(Dims d) {
  return std::to_string(d.m) + "x" + std::to_string(d.n) + "x" + std::to_string(d.k);
}

// Stored shape of a GEMM input: op(x) is (rows, cols), stored transposed when `trans`.
Shape stored(std::int64_t batch, std::int64_t rows, std::int64_t cols, bool trans) {
  Shape s = trans ? Shape{cols, rows} : Shape{rows, cols};
  if (batch > 0) s.insert(s.begin(), batch);
  return s;
}

// op(x) for every batch entry of a host tensor, in f64: [batch][rows][cols].
std::vector<double> op_matrix(const Tensor& x, bool trans, std::int64_t batch, std::int64_t rows,
                              std::int64_t cols) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(batch * rows * cols));
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < cols; ++j) {
        const std::int64_t r = trans ? j : i, c = trans ? i : j;
        std::int64_t index = x.offset() + r * x.stride(-2) + c * x.stride(-1);
        if (x.dim() == 3 && x.size(0) > 1) index += bi * x.stride(0);  // size 1: broadcast
        out.push_back(load_as_double(x.storage()->data(), x.dtype(), index));
      }
    }
  }
  return out;
}

// Naive f64 triple loop: alpha * op(a) @ op(b) + beta * c0, as a contiguous f64 tensor.
Tensor reference_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                      const Tensor& c0, double alpha, double beta) {
  Tensor out = Tensor::empty(c0.shape(), DType::f64);
  const std::int64_t batch = c0.dim() == 3 ? c0.size(0) : 1, m = c0.size(-2), n = c0.size(-1);
  const std::int64_t k = trans_a ? a.size(-2) : a.size(-1);
  const auto op_a = op_matrix(a, trans_a, batch, m, k);
  const auto op_b = op_matrix(b, trans_b, batch, k, n);
  const auto c_values = c0.to_vector<double>();
  double* o = out.data<double>();
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          sum += op_a[static_cast<std::size_t>((bi * m + i) * k + p)] *
                 op_b[static_cast<std::size_t>((bi * k + p) * n + j)];
        }
        const std::size_t idx = static_cast<std::size_t>((bi * m + i) * n + j);
        o[idx] = alpha * sum + (beta == 0 ? 0.0 : beta * c_values[idx]);
      }
    }
  }
  return out;
}

// f32 accumulation over K terms of size <= 1: error grows ~K ulps in the worst case.
Tolerance f32_tolerance(std::int64_t k) {
  return {2e-7 * static_cast<double>(k + 1), 1e-5};
}

using cpu::GemmLibrary;

// Runs the CPU backend's f32 GEMMs through one library (both are used, chosen per shape).
class ForcedLibrary {
 public:
  explicit ForcedLibrary(GemmLibrary library) { cpu::force_f32_library(library); }
  ~ForcedLibrary() { cpu::force_f32_library(std::nullopt); }
  ForcedLibrary(const ForcedLibrary&) = delete;
  ForcedLibrary& operator=(const ForcedLibrary&) = delete;
};

const char* library_name(GemmLibrary library) {
  return library == GemmLibrary::openblas ? "openblas" : "onednn";
}

class Gemm : public BackendTest {
 protected:
  // Runs gemm on the backend with host inputs (uploaded) and returns c as a host tensor.
  Tensor run(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c0,
             float alpha = 1.0f, float beta = 0.0f) {
    const Tensor da = upload(a), db = upload(b);
    Tensor dc = upload(c0);
    be().gemm(da, trans_a, db, trans_b, dc, alpha, beta);
    return download(dc);
  }

  void check_f32(Dims d, bool trans_a, bool trans_b, std::int64_t batch_a = 0,
                 std::int64_t batch_b = 0, float alpha = 1.0f, float beta = 0.0f) {
    SCOPED_TRACE(dims_str(d) + " trans_a=" + std::to_string(trans_a) +
                 " trans_b=" + std::to_string(trans_b) + " batches " + std::to_string(batch_a) +
                 "," + std::to_string(batch_b));
    const Tensor a = random_tensor(stored(batch_a, d.m, d.k, trans_a), DType::f32, 1);
    const Tensor b = random_tensor(stored(batch_b, d.k, d.n, trans_b), DType::f32, 2);
    const std::int64_t batch = std::max(batch_a, batch_b);
    const Tensor c0 = random_tensor(stored(batch, d.m, d.n, false), DType::f32, 3);
    const Tensor c = run(a, trans_a, b, trans_b, c0, alpha, beta);
    EXPECT_TRUE(
        all_close(c, reference_gemm(a, trans_a, b, trans_b, c0, alpha, beta), f32_tolerance(d.k)));
  }
};

const std::vector<Dims> kOddDims = {{1, 1, 1}, {7, 13, 5}, {1, 17, 1}, {33, 65, 17}, {64, 48, 96}};

TEST_P(Gemm, AllTransposeCombinationsOddSizes) {
  for (GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    SCOPED_TRACE(library_name(library));
    ForcedLibrary forced(library);
    for (Dims d : kOddDims) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true})
          check_f32(d, ta, tb);
      }
    }
  }
}

TEST_P(Gemm, LargerThanOneBlockF32) {
  for (GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    SCOPED_TRACE(library_name(library));
    ForcedLibrary forced(library);
    // Large enough that both libraries block and thread over M, N and K.
    check_f32({200, 300, 257}, false, true);
    check_f32({130, 70, 520}, true, false);
  }
}

TEST_P(Gemm, BatchedWithBroadcast) {
  for (GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    SCOPED_TRACE(library_name(library));
    ForcedLibrary forced(library);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        check_f32({7, 13, 5}, ta, tb, 3, 3);
        check_f32({7, 13, 5}, ta, tb, 3, 1);  // b shared (a weight): folded into one taller GEMM
        check_f32({7, 13, 5}, ta, tb, 1, 3);
        check_f32({33, 65, 17}, ta, tb, 4, 1);
        check_f32({1, 17, 1}, ta, tb, 2, 2);
      }
    }
  }
}

TEST_P(Gemm, AlphaBetaWithNonzeroC) {
  for (GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    SCOPED_TRACE(library_name(library));
    ForcedLibrary forced(library);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        check_f32({7, 13, 5}, ta, tb, 0, 0, 0.5f, 2.0f);
        check_f32({33, 65, 17}, ta, tb, 0, 0, -1.5f, 1.0f);
        check_f32({33, 65, 17}, ta, tb, 2, 1, 2.0f, -0.25f);
      }
    }
  }
}

TEST_P(Gemm, BetaZeroIgnoresNanInC) {
  const Tensor a = random_tensor({5, 4}, DType::f32, 1);
  const Tensor b = random_tensor({4, 3}, DType::f32, 2);
  const Tensor c0 = Tensor::full({5, 3}, DType::f32, std::nan(""));
  const Tensor c = run(a, false, b, false, c0);
  EXPECT_TRUE(all_close(c, reference_gemm(a, false, b, false, c0, 1, 0), f32_tolerance(4)));
}

TEST_P(Gemm, EmptyInnerDimensionScalesC) {
  const Tensor a = Tensor::empty({3, 0}, DType::f32);
  const Tensor b = Tensor::empty({0, 4}, DType::f32);
  const Tensor c0 = random_tensor({3, 4}, DType::f32, 3);
  const Tensor c = run(a, false, b, false, c0, 1.0f, 0.5f);
  EXPECT_TRUE(all_close(c, reference_gemm(a, false, b, false, c0, 1, 0.5), {0, 0}));
  const Tensor zero = run(a, false, b, false, c0, 1.0f, 0.0f);
  EXPECT_TRUE(all_close(zero, Tensor::zeros({3, 4}, DType::f32), {0, 0}));
}

// Views whose row stride exceeds their width: column slices of wider matrices, and a batch
// dimension permuted out of the middle (Megatron's (S, B, H) activations viewed as (B, S, H)).
TEST_P(Gemm, StridedViews) {
  for (GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    SCOPED_TRACE(library_name(library));
    ForcedLibrary forced(library);
    const std::int64_t m = 9, n = 11, k = 6;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE("trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
        const Shape sa = stored(0, m, k, ta), sb = stored(0, k, n, tb);
        const Tensor wide_a = random_tensor({sa[0], sa[1] + 5}, DType::f32, 4);
        const Tensor wide_b = random_tensor({sb[0], sb[1] + 3}, DType::f32, 5);
        const Tensor a = wide_a.slice(1, 2, sa[1]);  // host views for the reference
        const Tensor b = wide_b.slice(1, 3, sb[1]);
        Tensor wide_c = Tensor::empty({m, n + 7}, DType::f32, device());
        be().fill(wide_c, 0.25);
        Tensor c = wide_c.slice(1, 4, n);
        be().gemm(upload(wide_a).slice(1, 2, sa[1]), ta, upload(wide_b).slice(1, 3, sb[1]), tb, c,
                  1.5f, 1.0f);
        const Tensor c0 = Tensor::full({m, n}, DType::f32, 0.25);
        EXPECT_TRUE(
            all_close(download(c), reference_gemm(a, ta, b, tb, c0, 1.5, 1.0), f32_tolerance(k)));
        // Columns outside the view are untouched.
        const Tensor left = download(wide_c.slice(1, 0, 4));
        EXPECT_TRUE(all_close(left, Tensor::full({m, 4}, DType::f32, 0.25), {0, 0}));
      }
    }
  }
}

// Batched views over (S, B, H) storage, as Megatron lays out activations: a, c or both permuted,
// with a broadcast weight (the case gemm folds into one taller GEMM when the layout allows).
TEST_P(Gemm, PermutedBatchedViews) {
  const std::int64_t batch = 3, m = 10, k = 12, n = 7;
  const Tensor a_sbh = random_tensor({m, batch, k}, DType::f32, 6);  // (S, B, H) storage
  const Tensor a_bsh = random_tensor({batch, m, k}, DType::f32, 8);
  const Tensor w = random_tensor({n, k}, DType::f32, 7).unsqueeze(0);
  const Tensor c0 = Tensor::zeros({batch, m, n}, DType::f32);
  for (GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    ForcedLibrary forced(library);
    for (bool permuted_a : {false, true}) {
      for (bool permuted_c : {false, true}) {
        SCOPED_TRACE(std::string(library_name(library)) + " permuted a " +
                     std::to_string(permuted_a) + " permuted c " + std::to_string(permuted_c));
        const Tensor a = permuted_a ? a_sbh.permute({1, 0, 2}) : a_bsh;
        const Tensor device_a = permuted_a ? upload(a_sbh).permute({1, 0, 2}) : upload(a_bsh);
        Tensor c = permuted_c ? empty({m, batch, n}, DType::f32).permute({1, 0, 2})
                              : empty({batch, m, n}, DType::f32);
        be().gemm(device_a, false, upload(w), true, c);
        EXPECT_TRUE(
            all_close(download(c), reference_gemm(a, false, w, true, c0, 1, 0), f32_tolerance(k)));
      }
    }
  }
}

TEST_P(Gemm, Float64MatchesReferenceClosely) {
  for (Dims d : kOddDims) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Tensor a = random_tensor(stored(2, d.m, d.k, ta), DType::f64, 8);
        const Tensor b = random_tensor(stored(1, d.k, d.n, tb), DType::f64, 9);
        const Tensor c0 = random_tensor({2, d.m, d.n}, DType::f64, 10);
        const Tensor c = run(a, ta, b, tb, c0, 0.75f, -1.0f);
        EXPECT_TRUE(all_close(c, reference_gemm(a, ta, b, tb, c0, 0.75, -1.0),
                              {1e-14 * static_cast<double>(d.k + 1), 1e-13}))
            << dims_str(d) << " trans " << ta << tb;
      }
    }
  }
}

// bf16/f16 inputs are exact in the f64 reference, so the only error is f32 accumulation.
TEST_P(Gemm, HalfInputsAccumulateInF32) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (Dims d : {Dims{7, 13, 5}, Dims{33, 65, 17}, Dims{1, 17, 1}, Dims{48, 40, 300}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + dims_str(d) + " trans " +
                       std::to_string(ta) + std::to_string(tb));
          const Tensor a = random_tensor(stored(2, d.m, d.k, ta), dtype, 11);
          const Tensor b = random_tensor(stored(2, d.k, d.n, tb), dtype, 12);
          const Tensor c0 = random_tensor({2, d.m, d.n}, DType::f32, 13);
          const Tensor c = run(a, ta, b, tb, c0, 1.0f, 1.0f);
          EXPECT_TRUE(all_close(c, reference_gemm(a, ta, b, tb, c0, 1, 1), f32_tolerance(d.k)));
        }
      }
    }
  }
}

TEST_P(Gemm, HalfInputsStridedAndBroadcast) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor wide = random_tensor({2, 9, 20}, dtype, 14);
    const Tensor a = wide.slice(2, 3, 12);  // (2, 9, 12), row stride 20
    const Tensor b = random_tensor({1, 5, 12}, dtype, 15);
    Tensor c = empty({2, 9, 5}, DType::f32);
    be().gemm(upload(wide).slice(2, 3, 12), false, upload(b), true, c, 2.0f);
    const Tensor c0 = Tensor::zeros({2, 9, 5}, DType::f32);
    EXPECT_TRUE(
        all_close(download(c), reference_gemm(a, false, b, true, c0, 2, 0), f32_tolerance(12)));
  }
}

TEST_P(Gemm, SameInputsGiveBitwiseIdenticalOutputs) {
  for (auto [threads, library] : {std::pair{1, GemmLibrary::openblas},
                                  {2, GemmLibrary::openblas},
                                  {1, GemmLibrary::onednn},
                                  {2, GemmLibrary::onednn}}) {
    ScopedThreads scoped(threads);
    ForcedLibrary forced(library);
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Tensor a = upload(random_tensor({3, 96, 160}, dtype, 16));
      const Tensor b = upload(random_tensor({160, 200}, dtype, 17).unsqueeze(0));
      const Tensor a2 = upload(random_tensor({300, 257}, dtype, 18));
      const Tensor b2 = upload(random_tensor({129, 257}, dtype, 19));
      Tensor first = empty({3, 96, 200}, DType::f32), again = empty({3, 96, 200}, DType::f32);
      Tensor first2 = empty({300, 129}, DType::f32), again2 = empty({300, 129}, DType::f32);
      be().gemm(a, false, b, false, first);
      be().gemm(a2, false, b2, true, first2);
      for (int repeat = 0; repeat < 3; ++repeat) {
        be().gemm(a, false, b, false, again);
        be().gemm(a2, false, b2, true, again2);
        EXPECT_TRUE(bitwise_equal(download(first), download(again)))
            << dtype_name(dtype) << " threads " << threads << " " << library_name(library);
        EXPECT_TRUE(bitwise_equal(download(first2), download(again2)))
            << dtype_name(dtype) << " threads " << threads << " " << library_name(library);
      }
    }
  }
}

// x @ W^T, as every linear layer's forward runs it: each row of the product has the same bits
// whether it runs alone or beside others (continuous batching decodes a sequence beside whatever
// else is running and must give it the tokens it gets alone), from tiny to wide shapes, on one
// thread and two.
TEST_P(Gemm, RowsDoNotDependOnTheRowsBeside) {
  for (int threads : {1, 2}) {
    ScopedThreads scoped(threads);
    for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{16, 64},
                        {384, 128},
                        {512, 128},
                        {128, 512},
                        {1024, 256},
                        {50304, 128},
                        {1024, 4096}}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " N " + std::to_string(n) + " K " +
                   std::to_string(k));
      constexpr std::int64_t kRows = 12;
      const Tensor x = upload(random_tensor({kRows, k}, DType::f32, 5));
      const Tensor w = upload(random_tensor({n, k}, DType::f32, 6));
      Tensor together = empty({kRows, n}, DType::f32);
      be().gemm(x, false, w, true, together);
      const Tensor all_rows = download(together);
      for (std::int64_t m = 1; m < kRows; m += 3) {  // the first m rows, then each row alone
        Tensor first = empty({m, n}, DType::f32);
        be().gemm(x.slice(0, 0, m), false, w, true, first);
        EXPECT_TRUE(bitwise_equal(download(first), all_rows.slice(0, 0, m).contiguous()))
            << "the first " << m << " rows";
        Tensor alone = empty({1, n}, DType::f32);
        be().gemm(x.slice(0, m, 1), false, w, true, alone);
        EXPECT_TRUE(bitwise_equal(download(alone), all_rows.slice(0, m, 1).contiguous()))
            << "row " << m << " alone";
      }
    }
  }
}

// The f32 library rule of gemm_policy.h, on the shapes its comment quotes, and the override the
// tests above rely on to reach both libraries.
TEST_P(Gemm, F32RouteFollowsDocumentedRule) {
  if (GetParam() != "cpu") GTEST_SKIP() << "the library rule is the CPU backend's";
  const auto route = [](Shape a, bool ta, Shape b, bool tb, Shape c) {
    Tensor ct = Tensor::empty(c, DType::f32);
    return cpu::gemm_route(Tensor::empty(a, DType::f32), ta, Tensor::empty(b, DType::f32), tb, ct);
  };
  // OpenBLAS running generic kernels on this CPU serves no shape (blas_capabilities.h).
  const std::string blas = cpu::openblas_kernels_generic() ? "onednn" : "openblas";
  EXPECT_EQ(route({32, 32}, false, {32, 32}, false, {32, 32}).rfind(blas, 0), 0u);
  EXPECT_EQ(route({1, 32}, false, {32, 32}, true, {1, 32}).rfind("onednn", 0), 0u);  // x @ W^T
  EXPECT_EQ(route({2048, 3072}, false, {3072, 3072}, false, {2048, 3072}).rfind(blas, 0), 0u);
  EXPECT_EQ(route({3072, 512}, true, {3072, 3072}, false, {512, 3072}).rfind(blas, 0), 0u);
  EXPECT_EQ(route({2048, 768}, false, {2304, 768}, true, {2048, 2304}).rfind("onednn", 0), 0u);
  EXPECT_EQ(route({2048, 64}, false, {64, 3072}, false, {2048, 3072}).rfind("onednn", 0), 0u);
  EXPECT_EQ(route({12, 128, 64}, false, {12, 128, 64}, true, {12, 128, 128}).rfind("onednn", 0),
            0u);
  // A shared weight over a contiguous batch is one taller GEMM.
  EXPECT_NE(route({4, 512, 768}, false, {1, 3072, 768}, true, {4, 512, 3072}).find("batch folded"),
            std::string::npos);
  {
    ForcedLibrary forced(GemmLibrary::openblas);
    EXPECT_EQ(route({2048, 768}, false, {2304, 768}, true, {2048, 2304}), "openblas");
  }
  {
    ForcedLibrary forced(GemmLibrary::onednn);
    EXPECT_EQ(route({32, 32}, false, {32, 32}, false, {32, 32}).rfind("onednn", 0), 0u);
  }
}

// Expects gemm to throw an Error whose message contains every fragment.
void expect_error(const std::function<void()>& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& f : fragments) {
      EXPECT_NE(message.find(f), std::string::npos)
          << "message \"" << message << "\" lacks \"" << f << "\"";
    }
  }
}

TEST_P(Gemm, BadArgumentsThrowClearMessages) {
  const Tensor a = empty({4, 5}, DType::f32), b = empty({5, 6}, DType::f32);
  Tensor c = empty({4, 6}, DType::f32);
  expect_error(
      [&] {
        be().gemm(a, false, empty({6, 5}, DType::f32), false, c);
      },
      {"gemm", "inner dimensions (K) differ", "K = 5", "K = 6"});
  expect_error([&] { be().gemm(a, true, b, false, c); }, {"gemm", "K = 4", "K = 5"});
  Tensor wrong_c = empty({4, 7}, DType::f32);
  expect_error([&] { be().gemm(a, false, b, false, wrong_c); },
               {"gemm", "c must have shape [4, 6]", "float32[4, 7]"});
  expect_error(
      [&] {
        be().gemm(a, false, empty({5, 6}, DType::bf16), false, c);
      },
      {"gemm", "b", "must have the dtype of a"});
  expect_error(
      [&] {
        be().gemm(empty({4, 5}, DType::i32), false, b, false, c);
      },
      {"gemm", "a must be float32 or float64 or bfloat16 or float16", "int32"});
  Tensor bf16_c = empty({4, 6}, DType::bf16);
  expect_error(
      [&] {
        be().gemm(empty({4, 5}, DType::bf16), false, empty({5, 6}, DType::bf16), false, bf16_c);
      },
      {"gemm", "c must be float32 for bfloat16 inputs", "bfloat16[4, 6]"});
  Tensor f32_c = empty({4, 6}, DType::f32);
  expect_error(
      [&] {
        be().gemm(empty({4, 5}, DType::f64), false, empty({5, 6}, DType::f64), false, f32_c);
      },
      {"gemm", "c must be float64 for float64 inputs"});
  Tensor c3 = empty({3, 4, 6}, DType::f32);
  expect_error(
      [&] {
        be().gemm(empty({3, 4, 5}, DType::f32), false, empty({2, 5, 6}, DType::f32), false, c3);
      },
      {"gemm", "batch sizes differ", "has 3", "has 2", "1 to broadcast"});
  expect_error(
      [&] {
        be().gemm(empty({3, 4, 5}, DType::f32), false, b, false, c3);
      },
      {"gemm", "b must have 3 dimensions", "float32[5, 6]"});
  expect_error([&] { be().gemm(empty({5}, DType::f32), false, b, false, c); },
               {"gemm", "a must be 2-D (M, K) or 3-D (batch, M, K)", "float32[5]"});
  expect_error(
      [&] {
        be().gemm(empty({5, 4}, DType::f32).transpose(0, 1), false, b, false, c);
      },
      {"gemm", "a", "must have a contiguous last dimension"});
  const Tensor on_meta = Tensor::empty({4, 5}, DType::f32, Device::meta());
  expect_error([&] { be().gemm(on_meta, false, b, false, c); }, {"gemm", "a", "must be on"});
}

// The gradient of a GEMM is two GEMMs: for C = op(A) @ op(B) and loss = sum(C * W) (so dC = W),
// dA and dB computed with gemm itself must match central finite differences in f64.
TEST_P(Gemm, GradientIsGemm) {
  if (GetParam() != "cpu") GTEST_SKIP() << "finite differences run on the host reference";
  const std::int64_t m = 5, n = 4, k = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE("trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
      Tensor a = random_tensor(stored(0, m, k, ta), DType::f64, 20);
      Tensor b = random_tensor(stored(0, k, n, tb), DType::f64, 21);
      const Tensor dc = random_tensor({m, n}, DType::f64, 22);
      const auto loss = [&] {
        Tensor c = Tensor::empty({m, n}, DType::f64);
        be().gemm(a, ta, b, tb, c);
        return weighted_sum(c, dc);
      };
      // dop(A) = dC @ op(B)^T, dop(B) = op(A)^T @ dC; a stored-transposed input gets the
      // transposed product, which is the same gemm with its operands swapped.
      Tensor da = Tensor::empty(a.shape(), DType::f64), db = Tensor::empty(b.shape(), DType::f64);
      if (!ta) {
        be().gemm(dc, false, b, !tb, da);  // (M, K) = dC @ op(B)^T
      } else {
        be().gemm(b, tb, dc, true, da);  // (K, M) = op(B) @ dC^T
      }
      if (!tb) {
        be().gemm(a, !ta, dc, false, db);  // (K, N) = op(A)^T @ dC
      } else {
        be().gemm(dc, true, a, ta, db);  // (N, K) = dC^T @ op(A)
      }
      EXPECT_TRUE(gradient_matches(loss, a, da, 1e-7));
      EXPECT_TRUE(gradient_matches(loss, b, db, 1e-7));
    }
  }
}

MEGATRON_INSTANTIATE_BACKENDS(Gemm);

}  // namespace
}  // namespace megatron::testing
