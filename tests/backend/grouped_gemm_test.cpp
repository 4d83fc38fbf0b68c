// Grouped GEMM conformance (Mixture of Experts): uneven row groups, empty groups, the experts'
// weights stored (G, K, N) or transposed, alpha/beta, the weight-gradient form (a_g^T @ b_g into
// (G, K, N)), bf16 and f64 inputs, one group equal bit for bit to a plain gemm, and argument
// errors; against an fp64 loop over the groups.
#include <string>
#include <vector>

#include "backend_test_util.h"

namespace megatron::testing {
namespace {

const std::vector<std::int64_t> kGroups = {3, 0, 5, 1};  // an empty expert, uneven counts
constexpr std::int64_t kK = 7, kN = 6, kM = 9;

// Element (i, j) of a 2-D host tensor, in f64.
double at(const Tensor& t, std::int64_t i, std::int64_t j) {
  return load_as_double(t.storage()->data(), t.dtype(), t.offset() + i * t.stride(0) + j);
}

// The forward form: c_g = alpha * a_g @ op(b[g]) + beta * c0_g.
Tensor reference_rows(const Tensor& a, const Tensor& b, bool trans_b, const Tensor& c0,
                      double alpha, double beta) {
  Tensor out = Tensor::empty(c0.shape(), DType::f64);
  const std::vector<double> w = b.to_vector<double>(), c = c0.to_vector<double>();
  std::int64_t row = 0;
  for (std::size_t g = 0; g < kGroups.size(); ++g) {
    for (std::int64_t r = 0; r < kGroups[g]; ++r, ++row) {
      for (std::int64_t j = 0; j < kN; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < kK; ++p) {
          const std::int64_t wi = trans_b ? (j * kK + p) : (p * kN + j);
          sum += at(a, row, p) *
                 w[static_cast<std::size_t>(static_cast<std::int64_t>(g) * kK * kN + wi)];
        }
        const auto idx = static_cast<std::size_t>(row * kN + j);
        out.data<double>()[idx] = alpha * sum + beta * c[idx];
      }
    }
  }
  return out;
}

// The weight-gradient form: c[g] = alpha * a_g^T @ b_g + beta * c0[g].
Tensor reference_weights(const Tensor& a, const Tensor& b, const Tensor& c0, double alpha,
                         double beta) {
  Tensor out = Tensor::empty(c0.shape(), DType::f64);
  const std::vector<double> c = c0.to_vector<double>();
  std::int64_t first = 0;
  for (std::size_t g = 0; g < kGroups.size(); ++g) {
    for (std::int64_t p = 0; p < kK; ++p) {
      for (std::int64_t j = 0; j < kN; ++j) {
        double sum = 0;
        for (std::int64_t r = first; r < first + kGroups[g]; ++r)
          sum += at(a, r, p) * at(b, r, j);
        const auto idx = static_cast<std::size_t>((static_cast<std::int64_t>(g) * kK + p) * kN + j);
        out.data<double>()[idx] = alpha * sum + beta * c[idx];
      }
    }
    first += kGroups[g];
  }
  return out;
}

class GroupedGemm : public BackendTest {};

TEST_P(GroupedGemm, RowGroupsWithEveryWeightLayoutAndAlphaBeta) {
  const auto g = static_cast<std::int64_t>(kGroups.size());
  const Tensor a = random_tensor({kM, kK}, DType::f32, 1);
  const Tensor c0 = random_tensor({kM, kN}, DType::f32, 3);
  for (bool trans_b : {false, true}) {
    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 2.0f}}) {
      SCOPED_TRACE("trans_b=" + std::to_string(trans_b) + " alpha=" + std::to_string(alpha) +
                   " beta=" + std::to_string(beta));
      const Tensor b = random_tensor(trans_b ? Shape{g, kN, kK} : Shape{g, kK, kN}, DType::f32, 2);
      Tensor c = upload(c0);
      be().grouped_gemm(upload(a), false, upload(b), trans_b, kGroups, c, alpha, beta);
      EXPECT_TRUE(all_close(download(c), reference_rows(a, b, trans_b, c0, alpha, beta),
                            tolerance_for(DType::f32)));
    }
  }
}

TEST_P(GroupedGemm, WeightGradientsAccumulateAndAnEmptyGroupIsScaled) {
  const auto g = static_cast<std::int64_t>(kGroups.size());
  const Tensor a = random_tensor({kM, kK}, DType::f32, 4);
  const Tensor b = random_tensor({kM, kN}, DType::f32, 5);
  const Tensor c0 = random_tensor({g, kK, kN}, DType::f32, 6);
  for (float beta : {0.0f, 1.0f}) {
    SCOPED_TRACE("beta=" + std::to_string(beta));
    Tensor c = upload(c0);
    be().grouped_gemm(upload(a), true, upload(b), false, kGroups, c, 1.0f, beta);
    const Tensor got = download(c);
    EXPECT_TRUE(all_close(got, reference_weights(a, b, c0, 1.0, beta), tolerance_for(DType::f32)));
    // Group 1 has no rows: its gradient is zero, or what the accumulator held.
    const std::vector<double> g1 = got.slice(0, 1, 1).to_vector<double>();
    const std::vector<double> held = c0.slice(0, 1, 1).to_vector<double>();
    for (std::size_t i = 0; i < g1.size(); ++i)
      EXPECT_EQ(g1[i], beta == 0.0f ? 0.0 : held[i]) << i;
  }
}

TEST_P(GroupedGemm, Bf16InputsAccumulateInF32) {
  const auto g = static_cast<std::int64_t>(kGroups.size());
  const Tensor a = random_tensor({kM, kK}, DType::bf16, 7);
  const Tensor b = random_tensor({g, kN, kK}, DType::bf16, 8);
  const Tensor c0 = random_tensor({kM, kN}, DType::f32, 9);
  Tensor c = upload(c0);
  be().grouped_gemm(upload(a), false, upload(b), true, kGroups, c);
  // bf16 inputs are exact in f64; only the f32 accumulation rounds.
  EXPECT_TRUE(
      all_close(download(c), reference_rows(a, b, true, c0, 1.0, 0.0), tolerance_for(DType::f32)));
}

// f64 (the gradient checks' dtype; the CUDA backend's grouped cuBLAS call takes it whole).
TEST_P(GroupedGemm, F64RowGroupsAndWeightGradients) {
  const auto g = static_cast<std::int64_t>(kGroups.size());
  const Tensor a = random_tensor({kM, kK}, DType::f64, 12);
  const Tensor b = random_tensor({g, kN, kK}, DType::f64, 13);
  const Tensor c0 = random_tensor({kM, kN}, DType::f64, 14);
  Tensor c = upload(c0);
  be().grouped_gemm(upload(a), false, upload(b), true, kGroups, c, 0.5f, 2.0f);
  EXPECT_TRUE(
      all_close(download(c), reference_rows(a, b, true, c0, 0.5, 2.0), tolerance_for(DType::f64)));
  const Tensor dy = random_tensor({kM, kN}, DType::f64, 15);
  const Tensor w0 = random_tensor({g, kK, kN}, DType::f64, 16);
  Tensor w = upload(w0);
  be().grouped_gemm(upload(a), true, upload(dy), false, kGroups, w, 1.0f, 1.0f);
  EXPECT_TRUE(
      all_close(download(w), reference_weights(a, dy, w0, 1.0, 1.0), tolerance_for(DType::f64)));
}

TEST_P(GroupedGemm, OneGroupIsThePlainGemmBitForBit) {
  const Tensor a = random_tensor({kM, kK}, DType::f32, 10);
  const Tensor b = random_tensor({1, kK, kN}, DType::f32, 11);
  Tensor grouped = empty({kM, kN}, DType::f32), plain = empty({kM, kN}, DType::f32);
  be().grouped_gemm(upload(a), false, upload(b), false, {kM}, grouped);
  be().gemm(upload(a), false, upload(b).view({kK, kN}), false, plain);
  EXPECT_TRUE(bitwise_equal(download(grouped), download(plain)));
}

TEST_P(GroupedGemm, RefusesShapesThatDoNotMatchTheGroups) {
  const Tensor a = upload(random_tensor({kM, kK}, DType::f32, 1));
  const Tensor b = upload(random_tensor({4, kK, kN}, DType::f32, 2));
  Tensor c = empty({kM, kN}, DType::f32);
  const auto message = [&](const std::vector<std::int64_t>& groups, const Tensor& weights,
                           bool trans_a = false, bool trans_b = false) {
    try {
      be().grouped_gemm(a, trans_a, weights, trans_b, groups, c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({4, 0, 5}, b), "grouped_gemm: b must be (3, ., .) for 3 groups, got [4, 7, 6]");
  EXPECT_EQ(message({3, 0, 5, 2}, b),
            "grouped_gemm: groups [3, 0, 5, 2] (10 rows) for a [9, 7] and c [9, 6]");
  EXPECT_EQ(message({3, -1, 5, 2}, b), "grouped_gemm: negative group size in [3, -1, 5, 2]");
  EXPECT_EQ(message({}, b), "grouped_gemm: no groups");
}

MEGATRON_INSTANTIATE_BACKENDS(GroupedGemm);

}  // namespace
}  // namespace megatron::testing
