// Conformance of embedding_forward/backward on a vocabulary shard: ids at and beyond the shard
// boundaries, i32 and i64 ids, repeated ids, accumulate on/off, views, finite differences and
// determinism.
#include <vector>

#include "backend_test_util.h"

namespace megatron::testing {
namespace {

Tensor ids_tensor(const std::vector<std::int64_t>& ids, DType dtype) {
  if (dtype == DType::i64) return Tensor::from(ids, {static_cast<std::int64_t>(ids.size())});
  std::vector<std::int32_t> narrow(ids.begin(), ids.end());
  return Tensor::from(narrow, {static_cast<std::int64_t>(ids.size())});
}

// out[t] = table[id - start] for ids in the shard, else zeros (fp64).
Tensor forward_reference(const std::vector<std::int64_t>& ids, const Tensor& table,
                         std::int64_t vocab_start) {
  const auto values = table.to_vector<double>();
  const std::int64_t V = table.size(0), H = table.size(1);
  std::vector<double> out(ids.size() * static_cast<std::size_t>(H), 0.0);
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const std::int64_t row = ids[t] - vocab_start;
    if (row < 0 || row >= V) continue;
    for (std::int64_t j = 0; j < H; ++j)
      out[t * H + j] = values[row * H + j];
  }
  return Tensor::from(out, {static_cast<std::int64_t>(ids.size()), H});
}

// dtable = (initial if accumulate) + sum over tokens of dout rows, in fp64.
Tensor backward_reference(const std::vector<std::int64_t>& ids, const Tensor& dout,
                          std::int64_t vocab_start, const Tensor& initial, bool accumulate) {
  const std::int64_t V = initial.size(0), H = initial.size(1);
  std::vector<double> table = accumulate
                                  ? initial.to_vector<double>()
                                  : std::vector<double>(static_cast<std::size_t>(V * H), 0.0);
  const auto d = dout.to_vector<double>();
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const std::int64_t row = ids[t] - vocab_start;
    if (row < 0 || row >= V) continue;
    for (std::int64_t j = 0; j < H; ++j)
      table[row * H + j] += d[t * H + j];
  }
  return Tensor::from(table, {V, H});
}

class EmbeddingTest : public BackendTest {};

constexpr std::int64_t kVocabStart = 20, kShardRows = 11, kHidden = 7;
// Ids just below, at, inside, at the end of and beyond the shard [20, 31), negative, repeated.
const std::vector<std::int64_t> kIds = {19, 20, 25, 30, 31, -3, 25, 100, 20, 27, 30, 0, 25};

TEST_P(EmbeddingTest, ForwardSelectsShardRowsAndZerosTheRest) {
  for (DType id_dtype : {DType::i32, DType::i64}) {
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(id_dtype)) + " ids, " + std::string(dtype_name(dtype)));
      const Tensor table_host = random_tensor({kShardRows, kHidden}, dtype, 1);
      Tensor out = empty({static_cast<std::int64_t>(kIds.size()), kHidden}, dtype);
      be().fill(out, 7.0);  // stale values must be overwritten, zero rows included
      be().embedding_forward(upload(ids_tensor(kIds, id_dtype)), upload(table_host), kVocabStart,
                             out);
      // A lookup copies values, so the comparison is exact in every dtype.
      EXPECT_TRUE(
          all_close(download(out), forward_reference(kIds, table_host, kVocabStart), {0, 0}));
    }
  }
}

TEST_P(EmbeddingTest, ForwardOnViews) {
  // ids as a strided column, the table as a slice of a wider buffer, out as a strided view.
  std::vector<std::int64_t> pairs;
  for (std::int64_t id : kIds) {
    pairs.push_back(id);
    pairs.push_back(-999);
  }
  const auto n = static_cast<std::int64_t>(kIds.size());
  const Tensor ids = upload(Tensor::from(pairs, {n, 2})).select(1, 0);
  const Tensor wide_host = random_tensor({kShardRows, kHidden + 5}, DType::f32, 2);
  const Tensor table = upload(wide_host).slice(1, 3, kHidden);
  Tensor out_buffer = empty({n, kHidden + 2}, DType::f32);
  Tensor out = out_buffer.slice(1, 1, kHidden);
  be().embedding_forward(ids, table, kVocabStart, out);
  EXPECT_TRUE(
      all_close(download(out), forward_reference(kIds, download(table), kVocabStart), {0, 0}));
}

TEST_P(EmbeddingTest, BackwardScatterAddsRepeatedIds) {
  for (DType id_dtype : {DType::i32, DType::i64}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(id_dtype)) + " ids, " + std::string(dtype_name(dtype)) +
                     (accumulate ? ", accumulate" : ""));
        const auto n = static_cast<std::int64_t>(kIds.size());
        const Tensor dout_host = random_tensor({n, kHidden}, dtype, 3);
        const Tensor initial = random_tensor({kShardRows, kHidden}, dtype, 4);
        Tensor dtable = upload(initial);
        be().embedding_backward(upload(ids_tensor(kIds, id_dtype)), upload(dout_host), kVocabStart,
                                dtable, accumulate);
        EXPECT_TRUE(all_close(download(dtable),
                              backward_reference(kIds, dout_host, kVocabStart, initial, accumulate),
                              tolerance_for(dtype)));
      }
    }
  }
}

TEST_P(EmbeddingTest, BackwardOnViews) {
  const auto n = static_cast<std::int64_t>(kIds.size());
  const Tensor dout = upload(random_tensor({n, kHidden + 3}, DType::f32, 5)).slice(1, 2, kHidden);
  const Tensor initial = random_tensor({kShardRows, kHidden}, DType::f32, 6);
  Tensor dtable_buffer = upload(random_tensor({kShardRows, kHidden + 4}, DType::f32, 7));
  Tensor dtable = dtable_buffer.slice(1, 4, kHidden);
  be().copy(upload(initial), dtable);
  be().embedding_backward(upload(ids_tensor(kIds, DType::i64)), dout, kVocabStart, dtable, true);
  EXPECT_TRUE(all_close(download(dtable),
                        backward_reference(kIds, download(dout), kVocabStart, initial, true),
                        tolerance_for(DType::f32)));
}

// embedding_backward(dout) is the gradient of sum(embedding_forward(table) * dout) wrt table.
TEST_P(EmbeddingTest, BackwardMatchesFiniteDifferences) {
  if (GetParam() != "cpu") GTEST_SKIP() << "finite differences run on the fp64 CPU backend";
  const auto n = static_cast<std::int64_t>(kIds.size());
  const Tensor ids = ids_tensor(kIds, DType::i32);
  Tensor table = random_tensor({kShardRows, kHidden}, DType::f64, 8);
  const Tensor dout = random_tensor({n, kHidden}, DType::f64, 9);
  Tensor out = Tensor::empty({n, kHidden}, DType::f64);
  auto loss = [&] {
    be().embedding_forward(ids, table, kVocabStart, out);
    return weighted_sum(out, dout);
  };
  Tensor dtable = Tensor::empty(table.shape(), DType::f64);
  be().embedding_backward(ids, dout, kVocabStart, dtable, false);
  EXPECT_TRUE(gradient_matches(loss, table, dtable, 1e-7, table.numel()));
}

TEST_P(EmbeddingTest, DeterministicAcrossRunsAndThreads) {
  // Many tokens on few rows: every row is a long sum whose order must not depend on threads.
  const std::int64_t n = 6000, rows = 97, hidden = 64, start = 1000;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t)
    ids[static_cast<std::size_t>(t)] = start - 5 + (t * 7919) % (rows + 10);
  const Tensor ids_dev = upload(ids_tensor(ids, DType::i64));
  const Tensor dout = upload(random_tensor({n, hidden}, DType::f32, 10));
  const Tensor table = upload(random_tensor({rows, hidden}, DType::f32, 11));
  auto backward = [&](int threads) {
    ScopedThreads scoped(threads);
    Tensor dtable = upload(download(table));
    be().embedding_backward(ids_dev, dout, start, dtable, true);
    return download(dtable);
  };
  auto forward = [&](int threads) {
    ScopedThreads scoped(threads);
    Tensor out = empty({n, hidden}, DType::f32);
    be().embedding_forward(ids_dev, table, start, out);
    return download(out);
  };
  const Tensor grad = backward(1);
  EXPECT_TRUE(bitwise_equal(grad, backward(1)));
  EXPECT_TRUE(bitwise_equal(grad, backward(2)));
  EXPECT_TRUE(bitwise_equal(backward(2), backward(2)));
  EXPECT_TRUE(bitwise_equal(forward(1), forward(2)));
}

TEST_P(EmbeddingTest, RejectsBadArguments) {
  const Tensor table = empty({4, 3}, DType::f32);
  Tensor out = empty({2, 3}, DType::f32);
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
  const Tensor float_ids = empty({2}, DType::f32);
  expect_error([&] { be().embedding_forward(float_ids, table, 0, out); }, "embedding_forward",
               "ids must be int32 or int64");
  const Tensor ids = upload(ids_tensor({0, 1}, DType::i32));
  Tensor wrong_out = empty({3, 3}, DType::f32);
  expect_error([&] { be().embedding_forward(ids, table, 0, wrong_out); }, "embedding_forward",
               "out must have shape [2, 3]");
  Tensor dtable = empty({4, 3}, DType::f64);
  expect_error([&] { be().embedding_backward(ids, out, 0, dtable, false); }, "embedding_backward",
               "dtype");
  Tensor bf16_table = empty({4, 3}, DType::bf16);
  const Tensor bf16_dout = empty({2, 3}, DType::bf16);
  expect_error([&] { be().embedding_backward(ids, bf16_dout, 0, bf16_table, false); },
               "embedding_backward", "float32 or float64");
}

MEGATRON_INSTANTIATE_BACKENDS(EmbeddingTest);

}  // namespace
}  // namespace megatron::testing
