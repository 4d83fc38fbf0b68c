// Fused attention with a per-sample key padding mask (AttentionParams::key_padding_mask) against
// the plain fp64 reference: bidirectional and causal, cross-attention shapes (Sq != Sk), GQA/MQA,
// different padding per sample, queries that see no key (zeros, lse -inf, no NaN even when padded
// scores would overflow), dropout with unchanged Philox indices, (S, B, H, D)-permuted views,
// finite-difference gradients in fp64, determinism, every CPU instruction-set variant, bad masks.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attention_test_util.h"
#include "backend/cpu/attention_kernels.h"
#include "common/expect_error.h"

namespace megatron::testing {
namespace {

// A (B, Sk) u8 host mask: key j of sample b is padding when padded(b, j). Padding flags take
// several non-zero values, since any non-zero byte means "padding".
template <typename Fn>
Tensor padding_mask(std::int64_t batch, std::int64_t seq_k, Fn&& padded) {
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(batch * seq_k));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t j = 0; j < seq_k; ++j) {
      flags[static_cast<std::size_t>(b * seq_k + j)] =
          padded(b, j) ? static_cast<std::uint8_t>(1 + (b * 7 + j) % 255) : 0;
    }
  }
  return Tensor::from(flags, {batch, seq_k});
}

// Sample b has lengths[b] real keys, then padding (BERT, T5).
Tensor right_padding(const Config& c, const std::vector<std::int64_t>& lengths) {
  return padding_mask(c.batch, c.seq_k, [&](std::int64_t b, std::int64_t j) {
    return j >= lengths[static_cast<std::size_t>(b)];
  });
}

// The first starts[b] keys of sample b are padding: under the causal mask the queries before
// the first real key see none.
Tensor left_padding(const Config& c, const std::vector<std::int64_t>& starts) {
  return padding_mask(c.batch, c.seq_k, [&](std::int64_t b, std::int64_t j) {
    return j < starts[static_cast<std::size_t>(b)];
  });
}

// About a third of the keys padded in a fixed scattered pattern, plus keys [64, 128) of sample 0
// (a whole 64-key tile) and every key from 128 on of sample 1: tiles with no, some and only
// padding.
Tensor scattered_padding(const Config& c) {
  return padding_mask(c.batch, c.seq_k, [](std::int64_t b, std::int64_t j) {
    if (b == 0 && j >= 64 && j < 128) return true;
    if (b == 1 && j >= 128) return true;
    return (j * 7 + b * 3) % 10 < 3;
  });
}

struct Case {
  std::string what;
  Config c;
  Tensor padding;  // host (B, Sk) u8
};

std::vector<Case> conformance_cases(float dropout) {
  std::vector<Case> cases;
  auto add = [&](std::string what, Config c, auto&& make_padding) {
    c.dropout = dropout;
    cases.push_back({std::move(what), c, make_padding(c)});
  };
  add("bidirectional, right padding", Config{3, 70, 70, 4, 4, 16, false}, [](const Config& c) {
    return right_padding(c, {70, 41, 5});
  });
  add("causal, left padding: early queries see no key", Config{3, 70, 70, 2, 2, 16, true},
      [](const Config& c) {
        return left_padding(c, {0, 10, 65});
      });
  add("cross-attention Sq 5, Sk 9", Config{2, 5, 9, 2, 2, 8, false}, [](const Config& c) {
    return right_padding(c, {9, 3});
  });
  add("causal Sq < Sk, GQA", Config{2, 5, 9, 4, 2, 8, true}, [](const Config& c) {
    return right_padding(c, {6, 2});
  });
  add("GQA cross-attention, tiles with no, some and only padding",
      Config{2, 33, 200, 8, 2, 24, false}, [](const Config& c) { return scattered_padding(c); });
  add("8 (batch, kv head) pairs: dq in the dk/dv pass", Config{4, 65, 65, 4, 2, 32, true},
      [](const Config& c) {
        return right_padding(c, {65, 64, 1, 30});
      });
  add("causal Sq > Sk, MQA", Config{1, 70, 40, 2, 1, 8, true},
      [](const Config& c) { return scattered_padding(c); });
  add("one sample all padding", Config{3, 20, 20, 2, 2, 8, false}, [](const Config& c) {
    return right_padding(c, {20, 0, 7});
  });
  add("three tiles, D 64", Config{2, 130, 130, 2, 2, 64, true}, [](const Config& c) {
    return right_padding(c, {130, 64});
  });
  return cases;
}

class AttentionMaskTest : public AttentionTest {
 protected:
  AttentionParams params_with(const Config& c, const Tensor& padding) const {
    AttentionParams p = c.params();
    p.key_padding_mask = upload(padding);
    return p;
  }
  static void expect_matches(const Outputs& o, const Reference& r, const Config& c, DType dtype) {
    EXPECT_TRUE(all_close(o.out, as_tensor(r.out, c.q_shape()), forward_tolerance(dtype)));
    EXPECT_TRUE(lse_close(o.lse, r.lse, forward_tolerance(dtype)));
    if (!o.dq.defined()) return;
    EXPECT_TRUE(all_close(o.dq, as_tensor(r.dq, c.q_shape()), gradient_tolerance(dtype)));
    EXPECT_TRUE(all_close(o.dk, as_tensor(r.dk, c.kv_shape()), gradient_tolerance(dtype)));
    EXPECT_TRUE(all_close(o.dv, as_tensor(r.dv, c.kv_shape()), gradient_tolerance(dtype)));
  }
};

TEST_P(AttentionMaskTest, ForwardAndBackwardMatchReference) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Case& k : conformance_cases(0.0f)) {
      SCOPED_TRACE(k.what + ": " + k.c.name() + " " + std::string(dtype_name(dtype)));
      const Inputs in = make_inputs(k.c, dtype, 110);
      const AttentionParams p = params_with(k.c, k.padding);
      const Outputs o = run(k.c, p, in.q, in.k, in.v, in.dout);
      expect_matches(o, reference(k.c, p, in.q, in.k, in.v, &in.dout, k.padding), k.c, dtype);
    }
  }
}

// Dropout element (b, h, i, j) keeps its documented Philox index whatever is padded.
TEST_P(AttentionMaskTest, DropoutKeepsItsPhiloxIndicesUnderPadding) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Case& k : conformance_cases(0.3f)) {
      SCOPED_TRACE(k.what + ": " + k.c.name() + " " + std::string(dtype_name(dtype)));
      const Inputs in = make_inputs(k.c, dtype, 120);
      const AttentionParams p = params_with(k.c, k.padding);
      const Outputs o = run(k.c, p, in.q, in.k, in.v, in.dout);
      expect_matches(o, reference(k.c, p, in.q, in.k, in.v, &in.dout, k.padding), k.c, dtype);
    }
  }
}

// A mask with no padding is the same computation as no mask: the same bits, dropout included.
TEST_P(AttentionMaskTest, MaskWithoutPaddingGivesTheBitsOfNoMask) {
  for (const Config& c :
       {Config{2, 70, 90, 4, 2, 24, true, 0.2f}, Config{4, 33, 33, 4, 2, 32, false, 0.1f}}) {
    SCOPED_TRACE(c.name());
    const Inputs in = make_inputs(c, DType::f32, 130);
    const Outputs plain = run(c, c.params(), in.q, in.k, in.v, in.dout);
    const Tensor none =
        padding_mask(c.batch, c.seq_k, [](std::int64_t, std::int64_t) { return false; });
    const Outputs masked = run(c, params_with(c, none), in.q, in.k, in.v, in.dout);
    EXPECT_TRUE(bitwise_equal(masked.out, plain.out));
    EXPECT_TRUE(bitwise_equal(masked.lse, plain.lse));
    EXPECT_TRUE(bitwise_equal(masked.dq, plain.dq));
    EXPECT_TRUE(bitwise_equal(masked.dk, plain.dk));
    EXPECT_TRUE(bitwise_equal(masked.dv, plain.dv));
  }
}

// `t` (B, Sk, H, D) with every feature of the padding keys set to `value`, as a new host tensor.
Tensor with_padding_keys_set(const Tensor& t, const Tensor& padding, double value) {
  std::vector<double> values = t.to_vector<double>();
  const auto pad = padding.to_vector<double>();
  const std::int64_t row = t.size(2) * t.size(3);
  for (std::size_t key = 0; key < pad.size(); ++key) {
    if (pad[key] == 0) continue;
    for (std::int64_t e = 0; e < row; ++e)
      values[key * static_cast<std::size_t>(row) + static_cast<std::size_t>(e)] = value;
  }
  Tensor result = Tensor::empty(t.shape(), t.dtype());
  host().cast(Tensor::from(values, t.shape()), result);
  return result;
}

// Every value finite except lse, which is -inf exactly where the reference's is.
::testing::AssertionResult all_finite(const Tensor& t) {
  const auto values = t.to_vector<double>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return ::testing::AssertionFailure() << "element " << i << " is " << values[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Queries that see no key (a sample all padding; causal queries before the first real key) give
// zero output rows, lse -inf and zero dq rows, padding keys zero dk and dv, and nothing is NaN or
// infinite even though the padding keys' scores (about 1e4 times larger than the real ones) would
// overflow exp if they were not excluded before it.
TEST_P(AttentionMaskTest, QueriesThatSeeNoKeyGiveZerosAndNothingNonFinite) {
  const Config c{3, 70, 70, 2, 2, 16, true, 0.2f};
  const Tensor padding = padding_mask(c.batch, c.seq_k, [](std::int64_t b, std::int64_t j) {
    return b == 0 || (b == 1 && j < 66) || (b == 2 && j % 9 == 4);
  });
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Inputs in = make_inputs(c, dtype, 140);
    in.k = with_padding_keys_set(in.k, padding, 1e4);
    in.v = with_padding_keys_set(in.v, padding, -1e4);
    const AttentionParams p = params_with(c, padding);
    const Outputs o = run(c, p, in.q, in.k, in.v, in.dout);
    expect_matches(o, reference(c, p, in.q, in.k, in.v, &in.dout, padding), c, dtype);
    for (const Tensor* t : {&o.out, &o.dq, &o.dk, &o.dv})
      EXPECT_TRUE(all_finite(*t));

    const auto out = o.out.to_vector<double>(), dq = o.dq.to_vector<double>();
    const auto dk = o.dk.to_vector<double>(), dv = o.dv.to_vector<double>();
    const auto lse = o.lse.to_vector<double>(), pad = padding.to_vector<double>();
    const Index at{c};
    for (std::int64_t b = 0; b < c.batch; ++b) {
      for (std::int64_t h = 0; h < c.heads_q; ++h) {
        for (std::int64_t i = 0; i < c.seq_q; ++i) {
          const bool sees_none = b == 0 || (b == 1 && i < 66);
          const double row_lse = lse[at.row(b, h, i)];
          EXPECT_EQ(std::isinf(row_lse), sees_none) << "lse of b " << b << " h " << h << " i " << i;
          if (!sees_none) continue;
          EXPECT_EQ(row_lse, -std::numeric_limits<double>::infinity());
          for (std::int64_t d = 0; d < c.dim; ++d) {
            EXPECT_EQ(out[at.q(b, i, h, d)], 0.0) << "out of b " << b << " h " << h << " i " << i;
            EXPECT_EQ(dq[at.q(b, i, h, d)], 0.0) << "dq of b " << b << " h " << h << " i " << i;
          }
        }
      }
      for (std::int64_t j = 0; j < c.seq_k; ++j) {
        if (pad[static_cast<std::size_t>(b * c.seq_k + j)] == 0) continue;
        for (std::int64_t hk = 0; hk < c.heads_kv; ++hk) {
          for (std::int64_t d = 0; d < c.dim; ++d) {
            EXPECT_EQ(dk[at.kv(b, j, hk, d)], 0.0) << "dk of padding key b " << b << " j " << j;
            EXPECT_EQ(dv[at.kv(b, j, hk, d)], 0.0) << "dv of padding key b " << b << " j " << j;
          }
        }
      }
    }
  }
}

// As the layers pass them: q, k, v, out and all gradients are permuted views of (S, B, H, D)
// buffers, k and v slices of one fused buffer, lse a view of an (Sq, B, Hq) buffer.
TEST_P(AttentionMaskTest, AcceptsPermutedSbhdViews) {
  for (const Config& c :
       {Config{3, 70, 70, 4, 2, 16, false, 0.2f}, Config{3, 70, 70, 4, 2, 16, true, 0.0f}}) {
    SCOPED_TRACE(c.name());
    const DType dtype = DType::f32;
    const Inputs in = make_inputs(c, dtype, 150);
    const Tensor padding = right_padding(c, {70, 17, 64});
    const AttentionParams p = params_with(c, padding);
    const Reference r = reference(c, p, in.q, in.k, in.v, &in.dout, padding);

    auto sbhd = [&](const Tensor& bshd_host) {  // same values, stored (S, B, H, D)
      return upload(bshd_host.permute({1, 0, 2, 3}).contiguous()).permute({1, 0, 2, 3});
    };
    Tensor kv_host = Tensor::empty({c.seq_k, c.batch, 2 * c.heads_kv, c.dim}, dtype);
    Tensor k_part = kv_host.slice(2, 0, c.heads_kv),
           v_part = kv_host.slice(2, c.heads_kv, c.heads_kv);
    host().copy(in.k.permute({1, 0, 2, 3}), k_part);
    host().copy(in.v.permute({1, 0, 2, 3}), v_part);
    const Tensor kv = upload(kv_host);
    const Tensor k = kv.slice(2, 0, c.heads_kv).permute({1, 0, 2, 3});
    const Tensor v = kv.slice(2, c.heads_kv, c.heads_kv).permute({1, 0, 2, 3});
    const Tensor q = sbhd(in.q), dout = sbhd(in.dout);
    auto sbhd_empty = [&](const Shape& bshd_shape) {
      return empty({bshd_shape[1], bshd_shape[0], bshd_shape[2], bshd_shape[3]}, dtype)
          .permute({1, 0, 2, 3});
    };
    Tensor out = sbhd_empty(c.q_shape());
    Tensor lse = empty({c.seq_q, c.batch, c.heads_q}, dtype).permute({1, 2, 0});
    be().attention_forward(q, k, v, p, out, lse);
    Tensor dq = sbhd_empty(c.q_shape()), dk = sbhd_empty(c.kv_shape()),
           dv = sbhd_empty(c.kv_shape());
    be().attention_backward(dout, q, k, v, out, lse, p, dq, dk, dv);
    const Outputs o{download(out), download(lse), download(dq), download(dk), download(dv)};
    expect_matches(o, r, c, dtype);
  }
}

// The analytic gradients against central finite differences of loss = sum(out * w), in fp64;
// perturbing a padding key must change nothing.
TEST_P(AttentionMaskTest, GradientsMatchFiniteDifferences) {
  std::vector<Case> cases;
  const Config cross{1, 5, 9, 4, 2, 8, false, 0.25f};
  cases.push_back({"cross-attention, GQA, dropout", cross, right_padding(cross, {6})});
  const Config fused{2, 6, 6, 4, 4, 8, true, 0.0f};
  cases.push_back(
      {"causal, left padding, dq in the dk/dv pass", fused, left_padding(fused, {0, 3})});
  const Config mqa{2, 5, 9, 2, 1, 5, true, 0.3f};
  cases.push_back({"causal Sq < Sk, MQA, scattered", mqa, scattered_padding(mqa)});
  const Config empty_sample{3, 4, 5, 2, 2, 3, false, 0.1f};
  cases.push_back({"one sample all padding", empty_sample, right_padding(empty_sample, {5, 0, 2})});
  for (Case& k : cases) {
    SCOPED_TRACE(k.what + ": " + k.c.name());
    expect_gradients_match_finite_differences(k.c, params_with(k.c, k.padding),
                                              make_inputs(k.c, DType::f64, 160), 1000);
  }
}

TEST_P(AttentionMaskTest, DeterministicAcrossRunsAndThreadCounts) {
  const std::vector<Case> cases = [] {
    const Config two_pass{2, 200, 200, 4, 2, 64, true, 0.1f};
    const Config fused{4, 130, 150, 4, 2, 64, false, 0.0f};
    return std::vector<Case>{
        {"two-pass backward", two_pass, right_padding(two_pass, {200, 77})},
        {"dq fused into the dk/dv pass", fused, right_padding(fused, {150, 3, 64, 129})}};
  }();
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what + ": " + k.c.name());
    const Inputs in = make_inputs(k.c, DType::f32, 170);
    const AttentionParams p = params_with(k.c, k.padding);
    expect_same_bits_for_any_thread_count(k.c, p, in);
  }
}

// The CPU's AVX-512, AVX2 and SSE2 tile kernels each apply the mask (MEGATRON_CPU_ISA selects a
// lower one than the best).
TEST_P(AttentionMaskTest, EveryCpuInstructionSetVariantMatchesReference) {
  if (GetParam() != "cpu") GTEST_SKIP() << "instruction-set variants exist on the CPU backend only";
  const Config mixed{2, 33, 200, 8, 2, 24, false, 0.2f};
  const Config fused{4, 65, 65, 4, 2, 32, true, 0.0f};
  const std::vector<Case> cases = {
      {"tiles with no, some and only padding", mixed, scattered_padding(mixed)},
      {"dq in the dk/dv pass", fused, right_padding(fused, {65, 64, 1, 30})},
      {"causal, left padding", fused, left_padding(fused, {0, 10, 65, 3})}};
  for_each_cpu_attention_isa([&](const std::string&) {
    for (const Case& k : cases) {
      for (DType dtype : {DType::f32, DType::f64}) {
        SCOPED_TRACE(k.what + ": " + k.c.name() + " " + std::string(dtype_name(dtype)));
        const Inputs in = make_inputs(k.c, dtype, 180);
        const AttentionParams p = params_with(k.c, k.padding);
        const Outputs o = run(k.c, p, in.q, in.k, in.v, in.dout);
        expect_matches(o, reference(k.c, p, in.q, in.k, in.v, &in.dout, k.padding), k.c, dtype);
      }
    }
  });
}

TEST_P(AttentionMaskTest, RejectsBadKeyPaddingMasks) {
  const Config c{2, 4, 6, 4, 2, 8, false};
  const DType f32 = DType::f32;
  const Tensor q = upload(random_tensor(c.q_shape(), f32, 1));
  const Tensor k = upload(random_tensor(c.kv_shape(), f32, 2));
  const Tensor v = upload(random_tensor(c.kv_shape(), f32, 3));
  Tensor out = empty(c.q_shape(), f32), lse = empty(c.lse_shape(), f32);
  const std::string here = device().str();
  auto forward_with = [&](const Tensor& mask) {
    AttentionParams p = c.params();
    p.key_padding_mask = mask;
    be().attention_forward(q, k, v, p, out, lse);
  };
  auto unpadded = [](std::int64_t batch, std::int64_t seq_k) {
    return padding_mask(batch, seq_k, [](std::int64_t, std::int64_t) { return false; });
  };
  const std::string wrong_shape =
      "key_padding_mask must have shape [2, 6] (batch of q, keys of k), got uint8";

  expect_error_message(
      [&] {
        forward_with(upload(random_tensor({2, 6}, f32, 4)));
      },
      "attention_forward: key_padding_mask must be uint8, got float32[2, 6] on " + here);
  expect_error_message([&] { forward_with(upload(unpadded(2, 7))); },
                       "attention_forward: " + wrong_shape + "[2, 7] on " + here);
  expect_error_message(
      [&] {
        forward_with(upload(unpadded(2, 6)).view({2, 1, 6}));
      },
      "attention_forward: " + wrong_shape + "[2, 1, 6] on " + here);
  const Tensor transposed = upload(unpadded(6, 2)).transpose(0, 1);
  expect_error_message(
      [&] { forward_with(transposed); },
      "attention_forward: key_padding_mask uint8[2, 6] on " + here + " must be contiguous");
  // Elsewhere than the backend: host memory for CUDA, a meta tensor for the CPU.
  const Device elsewhere = device().is_cpu() ? Device::meta() : Device::cpu();
  expect_error_message(
      [&] {
        forward_with(Tensor::empty({2, 6}, DType::u8, elsewhere));
      },
      "attention_forward: key_padding_mask uint8[2, 6] on " + elsewhere.str() + " must be on " +
          here);

  AttentionParams good = c.params();
  good.key_padding_mask = upload(unpadded(2, 6));
  be().attention_forward(q, k, v, good, out, lse);
  Tensor dq = empty(c.q_shape(), f32), dk = empty(c.kv_shape(), f32), dv = empty(c.kv_shape(), f32);
  AttentionParams bad = good;
  bad.key_padding_mask = upload(unpadded(3, 6));
  expect_error_message([&] { be().attention_backward(out, q, k, v, out, lse, bad, dq, dk, dv); },
                       "attention_backward: " + wrong_shape + "[3, 6] on " + here);
}

MEGATRON_INSTANTIATE_BACKENDS(AttentionMaskTest);

}  // namespace
}  // namespace megatron::testing
