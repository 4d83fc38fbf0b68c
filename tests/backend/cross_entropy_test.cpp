// Conformance of the four cross-entropy steps: one shard against logsumexp - target, a simulated
// vocabulary-parallel run over 2 and 3 shards against the unsharded result, finite-difference
// gradients, in-place backward, multi-dimensional rows, determinism and argument checks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/optimizer_math.h"
#include "backend_test_util.h"

namespace megatron::testing {
namespace {

// fp64 reference on the logits' values as stored: loss = logsumexp(row) - row[target];
// dlogits = (softmax - onehot) * dloss.
struct Reference {
  Tensor loss, dlogits;
};

Reference reference(const Tensor& logits, const std::vector<std::int64_t>& targets,
                    const std::vector<double>& dloss) {
  const auto x = logits.to_vector<double>();
  const std::int64_t V = logits.size(-1), N = logits.numel() / V;
  std::vector<double> loss(static_cast<std::size_t>(N)), grad(x.size());
  for (std::int64_t r = 0; r < N; ++r) {
    const double* row = x.data() + r * V;
    const double m = *std::max_element(row, row + V);
    double sum = 0;
    for (std::int64_t j = 0; j < V; ++j)
      sum += std::exp(row[j] - m);
    const std::int64_t t = targets[static_cast<std::size_t>(r)];
    loss[static_cast<std::size_t>(r)] = m + std::log(sum) - row[t];
    for (std::int64_t j = 0; j < V; ++j) {
      grad[static_cast<std::size_t>(r * V + j)] =
          (std::exp(row[j] - m) / sum - (j == t ? 1.0 : 0.0)) * dloss[static_cast<std::size_t>(r)];
    }
  }
  Shape rows(logits.shape().begin(), logits.shape().end() - 1);
  return {Tensor::from(loss, rows), Tensor::from(grad, logits.shape())};
}

DType stats_dtype(DType logits) {
  return logits == DType::f64 ? DType::f64 : DType::f32;
}

Tensor targets_tensor(const std::vector<std::int64_t>& targets, DType dtype, const Shape& shape) {
  if (dtype == DType::i64) return Tensor::from(targets, shape);
  return Tensor::from(std::vector<std::int32_t>(targets.begin(), targets.end()), shape);
}

std::vector<std::int64_t> random_targets(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  const auto u = random_tensor({n}, DType::f64, seed, 0.0f, 1.0f).to_vector<double>();
  std::vector<std::int64_t> t;
  for (double v : u)
    t.push_back(std::min<std::int64_t>(vocab - 1, static_cast<std::int64_t>(v * vocab)));
  return t;
}

// The documented per-shard outputs of steps 1, 2 and 4 on one device, and step 3.
class CrossEntropyTest : public BackendTest {
 protected:
  struct Stats {
    Tensor row_max, sum_exp, target_logit;
  };

  Tensor row_max(const Tensor& logits) {
    Tensor m = empty(rows_of(logits), stats_dtype(logits.dtype()));
    be().cross_entropy_max(logits, m);
    return m;
  }
  Stats sums(const Tensor& logits, const Tensor& targets, std::int64_t vocab_start,
             const Tensor& global_max) {
    Stats s{global_max, empty(rows_of(logits), stats_dtype(logits.dtype())),
            empty(rows_of(logits), stats_dtype(logits.dtype()))};
    be().cross_entropy_sums(logits, targets, vocab_start, global_max, s.sum_exp, s.target_logit);
    return s;
  }
  Tensor loss(const Stats& s) {
    Tensor l = empty(s.row_max.shape(), s.row_max.dtype());
    be().cross_entropy_loss(s.row_max, s.sum_exp, s.target_logit, l);
    return l;
  }
  static Shape rows_of(const Tensor& logits) {
    return Shape(logits.shape().begin(), logits.shape().end() - 1);
  }
};

TEST_P(CrossEntropyTest, SingleShardMatchesReference) {
  const std::int64_t N = 13, V = 37;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (DType target_dtype : {DType::i32, DType::i64}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " logits, " +
                   std::string(dtype_name(target_dtype)) + " targets");
      Tensor logits_host = random_tensor({N, V}, dtype, 1, -4.0f, 4.0f);
      // One row far from zero: the max subtraction must keep exp from overflowing.
      for (std::int64_t j = 0; j < V; ++j) {
        store_from_double(logits_host.raw_data(), dtype, 2 * V + j,
                          500.0 + load_as_double(logits_host.raw_data(), dtype, 2 * V + j));
      }
      auto targets = random_targets(N, V, 2);
      targets[0] = 0;
      targets[1] = V - 1;
      const auto dloss = random_tensor({N}, stats_dtype(dtype), 3, 0.5f, 2.0f);
      const Reference ref = reference(logits_host, targets, dloss.to_vector<double>());

      const Tensor logits = upload(logits_host);
      const Tensor targets_dev = upload(targets_tensor(targets, target_dtype, {N}));
      const Stats stats = sums(logits, targets_dev, 0, row_max(logits));
      const Tolerance stat_tol =
          dtype == DType::f64 ? tolerance_for(DType::f64) : Tolerance{1e-5, 1e-5};
      EXPECT_TRUE(all_close(download(loss(stats)), ref.loss, stat_tol));

      Tensor dlogits = empty({N, V}, dtype);
      be().cross_entropy_backward(logits, targets_dev, 0, stats.row_max, stats.sum_exp,
                                  upload(dloss), dlogits);
      // Half-precision gradients carry one rounding: 2^-9 relative for bf16, 2^-12 for f16.
      const Tolerance grad_tol = dtype == DType::bf16  ? Tolerance{1e-6, 4e-3}
                                 : dtype == DType::f16 ? Tolerance{1e-6, 5e-4}
                                                       : stat_tol;
      EXPECT_TRUE(all_close(download(dlogits), ref.dlogits, grad_tol));
    }
  }
}

// Vocabulary-parallel: each shard computes its max, the maxes are combined with max, each shard's
// exp sums use the global max so they simply add, target logits add (only the owning shard has a
// non-zero one), and the backward uses the global statistics. Shards are views of one logits
// tensor (row stride V), and their gradients are written into views of one dlogits tensor.
TEST_P(CrossEntropyTest, VocabularyParallelShardsMatchUnsharded) {
  const std::int64_t N = 9, V = 37;
  const std::vector<std::vector<std::int64_t>> splits = {{0, 18, 37}, {0, 12, 25, 37}};
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor logits_host = random_tensor({N, V}, dtype, 4, -3.0f, 3.0f);
    const Tensor logits = upload(logits_host);
    // Targets at every shard boundary, plus random ones.
    std::vector<std::int64_t> targets = {0, 11, 12, 17, 18, 24, 25, 36, 5};
    const Tensor targets_dev = upload(targets_tensor(targets, DType::i64, {N}));
    const Tensor dloss = upload(random_tensor({N}, stats_dtype(dtype), 5, 0.5f, 2.0f));

    const Stats full = sums(logits, targets_dev, 0, row_max(logits));
    const Tensor full_loss = download(loss(full));
    Tensor full_grad = empty({N, V}, dtype);
    be().cross_entropy_backward(logits, targets_dev, 0, full.row_max, full.sum_exp, dloss,
                                full_grad);

    for (const auto& bounds : splits) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + std::to_string(bounds.size() - 1) +
                   " shards");
      std::vector<Tensor> shards;
      for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
        shards.push_back(logits.slice(1, bounds[k], bounds[k + 1] - bounds[k]));
      }
      // All-reduce(max) of the shard maxima.
      std::vector<double> global_max(N, -INFINITY);
      for (const Tensor& shard : shards) {
        const auto m = download(row_max(shard)).to_vector<double>();
        for (std::int64_t r = 0; r < N; ++r)
          global_max[r] = std::max(global_max[r], m[r]);
      }
      const Tensor max_dev = upload(Tensor::from(global_max, {N}).to(stats_dtype(dtype)));
      // All-reduce(sum) of exp sums and target logits.
      std::vector<double> sum_exp(N, 0.0), target_logit(N, 0.0);
      for (std::size_t k = 0; k < shards.size(); ++k) {
        const Stats s = sums(shards[k], targets_dev, bounds[k], max_dev);
        const auto se = download(s.sum_exp).to_vector<double>();
        const auto tl = download(s.target_logit).to_vector<double>();
        for (std::int64_t r = 0; r < N; ++r) {
          sum_exp[r] += se[r];
          target_logit[r] += tl[r];
        }
      }
      const Stats global{max_dev, upload(Tensor::from(sum_exp, {N}).to(stats_dtype(dtype))),
                         upload(Tensor::from(target_logit, {N}).to(stats_dtype(dtype)))};
      const Tolerance tol = dtype == DType::f64 ? tolerance_for(DType::f64) : Tolerance{1e-6, 1e-6};
      EXPECT_TRUE(all_close(download(loss(global)), full_loss, tol));
      EXPECT_TRUE(bitwise_equal(download(global.row_max), download(full.row_max)));

      Tensor grad = empty({N, V}, dtype);
      for (std::size_t k = 0; k < shards.size(); ++k) {
        Tensor grad_shard = grad.slice(1, bounds[k], bounds[k + 1] - bounds[k]);
        be().cross_entropy_backward(shards[k], targets_dev, bounds[k], global.row_max,
                                    global.sum_exp, dloss, grad_shard);
      }
      EXPECT_TRUE(all_close(download(grad), download(full_grad), tol));
    }
  }
}

// Prediction: each shard's first index of the global max, combined with a MIN, is the first argmax
// of the whole row (torch.argmax's tie rule), for every logits dtype; rows whose max lies in
// another shard give INT64_MAX.
TEST_P(CrossEntropyTest, ArgmaxIsTheFirstLargestLogitAcrossShards) {
  const std::int64_t N = 7, V = 37;
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor host_logits = random_tensor({N, V}, dtype, 9, -3.0f, 3.0f);
    // Ties: row 0 has its max at 5 and 30 (different shards), row 1 at 12 and 13 (one shard), row
    // 2's max is the last element.
    for (auto [row, col] : {std::pair{0, 5}, {0, 30}, {1, 12}, {1, 13}, {2, 36}})
      store_from_double(host_logits.raw_data(), dtype, row * V + col, 10.0);
    const auto values = host_logits.to_vector<double>();
    std::vector<std::int64_t> expected;
    for (std::int64_t r = 0; r < N; ++r) {
      const double* row = values.data() + r * V;
      expected.push_back(std::max_element(row, row + V) - row);  // the first of equal maxima
    }
    ASSERT_EQ(expected[0], 5);
    ASSERT_EQ(expected[1], 12);
    ASSERT_EQ(expected[2], 36);

    const Tensor logits = upload(host_logits);
    const Tensor global_max = row_max(logits);
    Tensor whole = empty({N}, DType::i64);
    be().cross_entropy_argmax(logits, global_max, 0, whole);
    EXPECT_EQ(download(whole).to_vector<std::int64_t>(), expected);

    const std::vector<std::int64_t> bounds = {0, 12, 25, 37};
    std::vector<std::int64_t> combined(N, kNone);
    bool some_shard_lacks_a_max = false;
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
      Tensor part = empty({N}, DType::i64);
      be().cross_entropy_argmax(logits.slice(1, bounds[k], bounds[k + 1] - bounds[k]), global_max,
                                bounds[k], part);
      const auto got = download(part).to_vector<std::int64_t>();
      for (std::int64_t r = 0; r < N; ++r) {
        some_shard_lacks_a_max |= got[r] == kNone;
        if (got[r] != kNone) {
          EXPECT_GE(got[r], bounds[k]);
          EXPECT_LT(got[r], bounds[k + 1]);
        }
        combined[r] = std::min(combined[r], got[r]);
      }
    }
    EXPECT_TRUE(some_shard_lacks_a_max);
    EXPECT_EQ(combined, expected);
  }
  Tensor wrong = empty({N}, DType::i32);
  const Tensor logits = empty({N, V}, DType::f32);
  EXPECT_THROW(be().cross_entropy_argmax(logits, empty({N}, DType::f32), 0, wrong), Error);
}

// The gradient of sum(dloss * loss(logits)) with respect to the logits, by central differences.
TEST_P(CrossEntropyTest, BackwardMatchesFiniteDifferences) {
  if (GetParam() != "cpu") GTEST_SKIP() << "finite differences run on the fp64 CPU backend";
  const std::int64_t N = 5, V = 11;
  Tensor logits = random_tensor({N, V}, DType::f64, 6, -2.0f, 2.0f);
  const auto targets = random_targets(N, V, 7);
  const Tensor targets_t = targets_tensor(targets, DType::i32, {N});
  const Tensor dloss = random_tensor({N}, DType::f64, 8, 0.5f, 2.0f);
  auto total_loss = [&] {
    const Stats s = sums(logits, targets_t, 0, row_max(logits));
    return weighted_sum(loss(s), dloss);
  };
  const Stats s = sums(logits, targets_t, 0, row_max(logits));
  Tensor dlogits = Tensor::empty({N, V}, DType::f64);
  be().cross_entropy_backward(logits, targets_t, 0, s.row_max, s.sum_exp, dloss, dlogits);
  EXPECT_TRUE(gradient_matches(total_loss, logits, dlogits, 1e-7, logits.numel()));
}

// Megatron's logits are (S, B, V) and its targets (B, S): targets pass as a transposed view, and
// the backward may overwrite the logits in place.
TEST_P(CrossEntropyTest, MultiDimensionalRowsAndInPlaceBackward) {
  const std::int64_t S = 6, B = 3, V = 29;
  const Tensor logits_host = random_tensor({S, B, V}, DType::f32, 9, -3.0f, 3.0f);
  const auto bs_targets = random_targets(B * S, V, 10);
  const Tensor targets = upload(targets_tensor(bs_targets, DType::i64, {B, S})).transpose(0, 1);
  std::vector<std::int64_t> sb_targets;
  for (std::int64_t s = 0; s < S; ++s) {
    for (std::int64_t b = 0; b < B; ++b)
      sb_targets.push_back(bs_targets[b * S + s]);
  }
  const Tensor dloss_host = random_tensor({S, B}, DType::f32, 11, 0.5f, 2.0f);
  const Reference ref = reference(logits_host, sb_targets, dloss_host.to_vector<double>());

  Tensor logits = upload(logits_host);
  const Stats s = sums(logits, targets, 0, row_max(logits));
  EXPECT_TRUE(all_close(download(loss(s)), ref.loss, {1e-5, 1e-5}));
  Tensor out_of_place = empty({S, B, V}, DType::f32);
  be().cross_entropy_backward(logits, targets, 0, s.row_max, s.sum_exp, upload(dloss_host),
                              out_of_place);
  EXPECT_TRUE(all_close(download(out_of_place), ref.dlogits, {1e-5, 1e-5}));
  be().cross_entropy_backward(logits, targets, 0, s.row_max, s.sum_exp, upload(dloss_host), logits);
  EXPECT_TRUE(bitwise_equal(download(logits), download(out_of_place)));
}

TEST_P(CrossEntropyTest, DeterministicAcrossRunsAndThreads) {
  const std::int64_t N = 64, V = 5001;
  const Tensor logits = upload(random_tensor({N, V}, DType::f32, 12, -5.0f, 5.0f));
  const Tensor targets = upload(targets_tensor(random_targets(N, V, 13), DType::i32, {N}));
  const Tensor dloss = upload(random_tensor({N}, DType::f32, 14));
  auto run = [&](int threads) {
    ScopedThreads scoped(threads);
    const Stats s = sums(logits, targets, 0, row_max(logits));
    Tensor grad = empty({N, V}, DType::f32);
    be().cross_entropy_backward(logits, targets, 0, s.row_max, s.sum_exp, dloss, grad);
    return std::vector<Tensor>{download(s.row_max), download(s.sum_exp), download(s.target_logit),
                               download(loss(s)), download(grad)};
  };
  const auto one = run(1);
  for (const auto& other : {run(1), run(2), run(2)}) {
    for (std::size_t k = 0; k < one.size(); ++k)
      EXPECT_TRUE(bitwise_equal(one[k], other[k])) << k;
  }
}

TEST_P(CrossEntropyTest, RejectsBadArguments) {
  const Tensor logits = empty({4, 10}, DType::f32);
  auto expect_error = [](auto&& call, const char* op, const char* fragment) {
    try {
      call();
      ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(op), std::string::npos) << message;
      EXPECT_NE(message.find(fragment), std::string::npos) << message;
    }
  };
  Tensor wrong_dtype_max = empty({4}, DType::f64);
  expect_error([&] { be().cross_entropy_max(logits, wrong_dtype_max); }, "cross_entropy_max",
               "row_max must be float32");
  Tensor wrong_shape_max = empty({5}, DType::f32);
  expect_error([&] { be().cross_entropy_max(logits, wrong_shape_max); }, "cross_entropy_max",
               "row_max must have shape [4]");
  const Tensor float_targets = empty({4}, DType::f32);
  Tensor m = empty({4}, DType::f32), se = empty({4}, DType::f32), tl = empty({4}, DType::f32);
  expect_error([&] { be().cross_entropy_sums(logits, float_targets, 0, m, se, tl); },
               "cross_entropy_sums", "targets must be int32 or int64");
  const Tensor int_logits = empty({4, 10}, DType::i32);
  expect_error([&] { be().cross_entropy_max(int_logits, m); }, "cross_entropy_max",
               "logits must be float32");
  Tensor loss64 = empty({4}, DType::f64);
  expect_error([&] { be().cross_entropy_loss(m, se, tl, loss64); }, "cross_entropy_loss", "dtype");
  const Tensor targets = empty({4}, DType::i32);
  Tensor bf16_grad = empty({4, 10}, DType::bf16);
  expect_error([&] { be().cross_entropy_backward(logits, targets, 0, m, se, m, bf16_grad); },
               "cross_entropy_backward", "dtype");
}

// The vectorisable exp shared by the CPU and CUDA kernels, against the library exp in double.
TEST(SoftmaxExp, WithinTwoUlpOverItsDomain) {
  double worst_ulp = 0;
  float worst_at = 0;
  const int samples = 400000;
  for (int i = 0; i <= samples; ++i) {
    const float x = -87.3f + (88.0f + 87.3f) * static_cast<float>(i) / samples;
    const double expected = std::exp(static_cast<double>(x));
    const auto rounded = static_cast<float>(expected);
    const double ulp = std::nextafter(rounded, INFINITY) - rounded;
    const double error = std::abs(ops::softmax_exp(x) - expected) / ulp;
    if (error > worst_ulp) {
      worst_ulp = error;
      worst_at = x;
    }
  }
  EXPECT_LE(worst_ulp, 2.0) << "at x = " << worst_at;
  EXPECT_EQ(ops::softmax_exp(0.0f), 1.0f);
  EXPECT_EQ(ops::softmax_exp(-INFINITY), 0.0f);
  EXPECT_EQ(ops::softmax_exp(-100.0f), 0.0f);  // below FLT_MIN: flushed to zero
  EXPECT_TRUE(std::isnan(ops::softmax_exp(NAN)));
  EXPECT_EQ(ops::softmax_exp(-1e-30f), 1.0f);
}

MEGATRON_INSTANTIATE_BACKENDS(CrossEntropyTest);

}  // namespace
}  // namespace megatron::testing
