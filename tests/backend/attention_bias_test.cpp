// Fused attention with an additive score bias (AttentionParams::bias, T5's relative position
// bias, added after scaling) and its gradient summed over the batch, against the plain fp64
// reference: causal and bidirectional, cross-attention shapes, GQA, key padding, document first
// keys, dropout; fp64 finite differences for q, k, v and the bias; determinism over thread
// counts; every CPU instruction set; bad tensors.
#include <cstdint>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "backend/cpu/attention_kernels.h"
#include "common/expect_error.h"

namespace megatron::testing {
namespace {

Shape bias_shape(const Config& c) {
  return {c.heads_q, c.seq_q, c.seq_k};
}

// Right padding: sample b has lengths[b] real keys.
Tensor right_padding(const Config& c, const std::vector<std::int64_t>& lengths) {
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(c.batch * c.seq_k), 0);
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t j = lengths[static_cast<std::size_t>(b)]; j < c.seq_k; ++j)
      flags[static_cast<std::size_t>(b * c.seq_k + j)] = 1;
  }
  return Tensor::from(flags, {c.batch, c.seq_k});
}

struct Case {
  std::string what;
  Config c;
  Tensor padding;  // host (B, Sk) u8 or undefined
};

std::vector<Case> cases(float dropout) {
  std::vector<Case> all;
  auto add = [&](std::string what, Config c, Tensor padding = Tensor()) {
    c.dropout = dropout;
    all.push_back({std::move(what), c, std::move(padding)});
  };
  add("bidirectional, two tiles", Config{2, 70, 70, 4, 4, 16, false});
  add("causal, three tiles, GQA", Config{2, 150, 150, 4, 2, 16, true});
  const Config padded{3, 70, 70, 2, 2, 8, false};
  add("bidirectional with padding (T5's encoder)", padded, right_padding(padded, {70, 33, 1}));
  const Config cross{2, 9, 130, 4, 4, 8, false};
  add("cross-attention shapes with padding", cross, right_padding(cross, {130, 64}));
  add("8 (batch, kv head) pairs: the fused backward's size", Config{4, 65, 65, 4, 2, 32, true});
  return all;
}

class AttentionBiasTest : public AttentionTest {
 protected:
  struct WithBias {
    Outputs o;
    Tensor dbias;  // host
  };
  WithBias run_with_bias(const Config& c, const AttentionParams& p, const Inputs& in) {
    const DType dtype = in.q.dtype();
    const Tensor q = upload(in.q), k = upload(in.k), v = upload(in.v);
    Tensor out = empty(c.q_shape(), dtype), lse = empty(c.lse_shape(), dtype);
    be().attention_forward(q, k, v, p, out, lse);
    Tensor dq = empty(c.q_shape(), dtype), dk = empty(c.kv_shape(), dtype),
           dv = empty(c.kv_shape(), dtype), dbias = empty(bias_shape(c), dtype);
    be().fill(dbias, 9.0);  // stale values must be overwritten
    be().attention_backward(upload(in.dout), q, k, v, out, lse, p, dq, dk, dv, &dbias);
    return {{download(out), download(lse), download(dq), download(dk), download(dv)},
            download(dbias)};
  }
  AttentionParams params_with(const Case& k, const Tensor& bias) const {
    AttentionParams p = k.c.params();
    p.bias = upload(bias);
    if (k.padding.defined()) p.key_padding_mask = upload(k.padding);
    return p;
  }
  void check(const std::vector<Case>& all, std::uint64_t seed) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Case& k : all) {
        SCOPED_TRACE(k.what + ": " + k.c.name() + " " + std::string(dtype_name(dtype)));
        const Inputs in = make_inputs(k.c, dtype, seed);
        const Tensor bias = random_tensor(bias_shape(k.c), dtype, seed + 7, -2.0f, 2.0f);
        const AttentionParams p = params_with(k, bias);
        const WithBias got = run_with_bias(k.c, p, in);
        const Reference r =
            reference(k.c, p, in.q, in.k, in.v, &in.dout, k.padding, Tensor(), bias);
        EXPECT_TRUE(
            all_close(got.o.out, as_tensor(r.out, k.c.q_shape()), forward_tolerance(dtype)));
        EXPECT_TRUE(lse_close(got.o.lse, r.lse, forward_tolerance(dtype)));
        const Tolerance g = gradient_tolerance(dtype);
        EXPECT_TRUE(all_close(got.o.dq, as_tensor(r.dq, k.c.q_shape()), g));
        EXPECT_TRUE(all_close(got.o.dk, as_tensor(r.dk, k.c.kv_shape()), g));
        EXPECT_TRUE(all_close(got.o.dv, as_tensor(r.dv, k.c.kv_shape()), g));
        EXPECT_TRUE(all_close(got.dbias, as_tensor(r.dbias, bias_shape(k.c)), g));
        // Without asking for the bias gradient: the same dq, dk, dv (possibly by the fused path).
        const Outputs plain = run(k.c, p, in.q, in.k, in.v, in.dout);
        EXPECT_TRUE(all_close(plain.dq, got.o.dq, g));
        EXPECT_TRUE(all_close(plain.dk, got.o.dk, g));
      }
    }
  }
};

TEST_P(AttentionBiasTest, ForwardBackwardAndBiasGradientMatchReference) {
  check(cases(0.0f), 310);
}

TEST_P(AttentionBiasTest, DropoutKeepsItsPhiloxIndices) {
  check(cases(0.25f), 320);
}

// The bias applies together with documents' first keys (each query's range of keys).
TEST_P(AttentionBiasTest, CombinesWithFirstKeys) {
  const Config c{2, 70, 70, 2, 2, 8, true};
  std::vector<std::int32_t> first(static_cast<std::size_t>(c.batch * c.seq_q), 0);
  for (std::int64_t i = 40; i < c.seq_q; ++i)
    first[static_cast<std::size_t>(c.seq_q + i)] = 40;
  const Tensor first_key = Tensor::from(first, {c.batch, c.seq_q});
  const Inputs in = make_inputs(c, DType::f64, 330);
  const Tensor bias = random_tensor(bias_shape(c), DType::f64, 331);
  AttentionParams p = c.params();
  p.bias = upload(bias);
  p.first_key = upload(first_key);
  const WithBias got = run_with_bias(c, p, in);
  const Reference r = reference(c, p, in.q, in.k, in.v, &in.dout, Tensor(), first_key, bias);
  const Tolerance g = gradient_tolerance(DType::f64);
  EXPECT_TRUE(all_close(got.o.out, as_tensor(r.out, c.q_shape()), g));
  EXPECT_TRUE(all_close(got.o.dq, as_tensor(r.dq, c.q_shape()), g));
  EXPECT_TRUE(all_close(got.dbias, as_tensor(r.dbias, bias_shape(c)), g));
}

// Central finite differences of loss = sum(out * w) in fp64, the bias included.
TEST_P(AttentionBiasTest, GradientsMatchFiniteDifferences) {
  const Config causal{2, 6, 6, 4, 2, 5, true, 0.2f};
  const Config cross{2, 4, 7, 2, 2, 3, false, 0.0f};
  const std::vector<Case> all = {{"causal, GQA, dropout", causal, Tensor()},
                                 {"cross, padding", cross, right_padding(cross, {7, 3})}};
  for (const Case& k : all) {
    SCOPED_TRACE(k.what + ": " + k.c.name());
    Inputs in = make_inputs(k.c, DType::f64, 340);
    Tensor bias = random_tensor(bias_shape(k.c), DType::f64, 341);
    const Tensor weights = random_tensor(k.c.q_shape(), DType::f64, 342);
    auto loss = [&] {
      const AttentionParams p = params_with(k, bias);
      Tensor out = empty(k.c.q_shape(), DType::f64), lse = empty(k.c.lse_shape(), DType::f64);
      be().attention_forward(upload(in.q), upload(in.k), upload(in.v), p, out, lse);
      return weighted_sum(download(out), weights);
    };
    Inputs with_weights = in;
    with_weights.dout = weights;
    const WithBias got = run_with_bias(k.c, params_with(k, bias), with_weights);
    EXPECT_TRUE(gradient_matches(loss, in.q, got.o.dq, 1e-6, 1000));
    EXPECT_TRUE(gradient_matches(loss, in.k, got.o.dk, 1e-6, 1000));
    EXPECT_TRUE(gradient_matches(loss, in.v, got.o.dv, 1e-6, 1000));
    EXPECT_TRUE(gradient_matches(loss, bias, got.dbias, 1e-6, 1000));
  }
}

TEST_P(AttentionBiasTest, BiasGradientIsDeterministicAcrossThreadCounts) {
  const Config c{4, 130, 130, 4, 2, 32, false, 0.1f};
  const Case k{"", c, right_padding(c, {130, 100, 64, 7})};
  const Inputs in = make_inputs(c, DType::f32, 350);
  const AttentionParams p = params_with(k, random_tensor(bias_shape(c), DType::f32, 351));
  const WithBias first = run_with_bias(c, p, in);
  for (int threads : {1, 2}) {
    ScopedThreads scoped(threads);
    const WithBias again = run_with_bias(c, p, in);
    SCOPED_TRACE(std::to_string(threads) + " threads");
    EXPECT_TRUE(bitwise_equal(again.dbias, first.dbias));
    EXPECT_TRUE(bitwise_equal(again.o.dq, first.o.dq));
    EXPECT_TRUE(bitwise_equal(again.o.dk, first.o.dk));
  }
}

TEST_P(AttentionBiasTest, EveryCpuInstructionSetVariantMatchesReference) {
  if (GetParam() != "cpu") GTEST_SKIP() << "instruction-set variants exist on the CPU backend only";
  for_each_cpu_attention_isa([&](const std::string&) { check(cases(0.1f), 360); });
}

TEST_P(AttentionBiasTest, RejectsBadBiases) {
  const Config c{2, 4, 6, 4, 2, 8, false};
  const Tensor q = upload(random_tensor(c.q_shape(), DType::f32, 1));
  const Tensor k = upload(random_tensor(c.kv_shape(), DType::f32, 2));
  const Tensor v = upload(random_tensor(c.kv_shape(), DType::f32, 3));
  Tensor out = empty(c.q_shape(), DType::f32), lse = empty(c.lse_shape(), DType::f32);
  const std::string here = device().str();
  auto forward_with = [&](const Tensor& bias) {
    AttentionParams p = c.params();
    p.bias = bias;
    be().attention_forward(q, k, v, p, out, lse);
  };
  expect_error_message(
      [&] {
        forward_with(upload(random_tensor({4, 4, 5}, DType::f32, 4)));
      },
      "attention_forward: bias must have shape [4, 4, 6] (heads of q, queries, keys), got "
      "float32[4, 4, 5] on " +
          here);
  expect_error_message(
      [&] {
        forward_with(upload(random_tensor({4, 4, 6}, DType::f64, 5)));
      },
      "attention_forward: bias float64[4, 4, 6] on " + here +
          " must have the dtype of q float32[2, 4, 4, 8] on " + here);

  AttentionParams plain = c.params();
  be().attention_forward(q, k, v, plain, out, lse);
  Tensor dq = empty(c.q_shape(), DType::f32), dk = empty(c.kv_shape(), DType::f32),
         dv = empty(c.kv_shape(), DType::f32), dbias = empty(bias_shape(c), DType::f32);
  expect_error_message(
      [&] { be().attention_backward(out, q, k, v, out, lse, plain, dq, dk, dv, &dbias); },
      "attention_backward: dbias was given but params.bias was not");
}

MEGATRON_INSTANTIATE_BACKENDS(AttentionBiasTest);

}  // namespace
}  // namespace megatron::testing
