// Fused attention with a per-query first key (AttentionParams::first_key: GPT's
// reset_attention_mask, documents packed into one sample) against the plain fp64 reference:
// document boundaries inside and across 64-key tiles, together with key padding, GQA, dropout with
// unchanged Philox indices, queries that see no key, finite-difference gradients in fp64,
// determinism, every CPU instruction-set variant, all-zero first keys = no first keys, bad tensors.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "backend/cpu/attention_kernels.h"
#include "common/expect_error.h"

namespace megatron::testing {
namespace {

// (B, Sq) i32 host tensor: sample b's documents end at the positions in ends[b] (Megatron's EOD
// positions); a query after an EOD at i sees keys from i + 1 on, as
// _get_ltor_masks_and_position_ids' `attention_mask[(i + 1):, :(i + 1)] = 0`.
Tensor documents(const Config& c, const std::vector<std::vector<std::int64_t>>& eods) {
  std::vector<std::int32_t> first(static_cast<std::size_t>(c.batch * c.seq_q), 0);
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t i = 0; i < c.seq_q; ++i) {
      std::int32_t start = 0;
      for (std::int64_t eod : eods[static_cast<std::size_t>(b)]) {
        if (eod < i) start = static_cast<std::int32_t>(eod + 1);
      }
      first[static_cast<std::size_t>(b * c.seq_q + i)] = start;
    }
  }
  return Tensor::from(first, {c.batch, c.seq_q});
}

std::vector<std::int64_t> every(std::int64_t step, std::int64_t end) {
  std::vector<std::int64_t> eods;
  for (std::int64_t i = step - 1; i < end; i += step)
    eods.push_back(i);
  return eods;
}

struct Case {
  std::string what;
  Config c;
  Tensor first;    // host (B, Sq) i32
  Tensor padding;  // host (B, Sk) u8 or undefined
};

Tensor right_padding(const Config& c, const std::vector<std::int64_t>& lengths) {
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(c.batch * c.seq_k), 0);
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t j = lengths[static_cast<std::size_t>(b)]; j < c.seq_k; ++j)
      flags[static_cast<std::size_t>(b * c.seq_k + j)] = 1;
  }
  return Tensor::from(flags, {c.batch, c.seq_k});
}

std::vector<Case> conformance_cases(float dropout) {
  std::vector<Case> cases;
  auto add = [&](std::string what, Config c, auto&& make_first, Tensor padding = Tensor()) {
    c.dropout = dropout;
    cases.push_back({std::move(what), c, make_first(c), std::move(padding)});
  };
  const Config three_tiles{3, 150, 150, 4, 2, 16, true};
  add("one document, boundaries inside and across tiles, many short documents", three_tiles,
      [](const Config& c) {
        return documents(c, {{}, {10, 63, 64, 129}, every(7, 150)});
      });
  add("boundary on the last query, MQA", Config{2, 70, 70, 2, 1, 8, true}, [](const Config& c) {
    return documents(c, {{68}, {0, 1, 2}});
  });
  const Config padded{3, 80, 80, 4, 4, 16, true};
  add(
      "with right padding", padded,
      [](const Config& c) {
        return documents(c, {{30}, {5, 70}, {}});
      },
      right_padding(padded, {80, 60, 20}));
  add("bidirectional: keys after the query too", Config{2, 70, 70, 2, 2, 8, false},
      [](const Config& c) {
        return documents(c, {{40}, {3, 64}});
      });
  add("D 64, two tiles", Config{2, 130, 130, 2, 2, 64, true}, [](const Config& c) {
    return documents(c, {{63}, {100}});
  });
  return cases;
}

class AttentionFirstKeyTest : public AttentionTest {
 protected:
  AttentionParams params_with(const Case& k) const {
    AttentionParams p = k.c.params();
    p.first_key = upload(k.first);
    if (k.padding.defined()) p.key_padding_mask = upload(k.padding);
    return p;
  }
  Reference reference_of(const Case& k, const AttentionParams& p, const Inputs& in) const {
    return reference(k.c, p, in.q, in.k, in.v, &in.dout, k.padding, k.first);
  }
  static void expect_matches(const Outputs& o, const Reference& r, const Config& c, DType dtype) {
    EXPECT_TRUE(all_close(o.out, as_tensor(r.out, c.q_shape()), forward_tolerance(dtype)));
    EXPECT_TRUE(lse_close(o.lse, r.lse, forward_tolerance(dtype)));
    EXPECT_TRUE(all_close(o.dq, as_tensor(r.dq, c.q_shape()), gradient_tolerance(dtype)));
    EXPECT_TRUE(all_close(o.dk, as_tensor(r.dk, c.kv_shape()), gradient_tolerance(dtype)));
    EXPECT_TRUE(all_close(o.dv, as_tensor(r.dv, c.kv_shape()), gradient_tolerance(dtype)));
  }
  void check_cases(const std::vector<Case>& cases, std::uint64_t seed) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Case& k : cases) {
        SCOPED_TRACE(k.what + ": " + k.c.name() + " " + std::string(dtype_name(dtype)));
        const Inputs in = make_inputs(k.c, dtype, seed);
        const AttentionParams p = params_with(k);
        expect_matches(run(k.c, p, in.q, in.k, in.v, in.dout), reference_of(k, p, in), k.c, dtype);
      }
    }
  }
};

TEST_P(AttentionFirstKeyTest, ForwardAndBackwardMatchReference) {
  check_cases(conformance_cases(0.0f), 210);
}

// Dropout element (b, h, i, j) keeps its documented Philox index whatever the documents are.
TEST_P(AttentionFirstKeyTest, DropoutKeepsItsPhiloxIndices) {
  check_cases(conformance_cases(0.3f), 220);
}

// First keys all 0 are the same computation as none: the same bits, dropout included.
TEST_P(AttentionFirstKeyTest, ZeroFirstKeysGiveTheBitsOfNone) {
  const Config c{2, 130, 130, 4, 2, 24, true, 0.2f};
  const Inputs in = make_inputs(c, DType::f32, 230);
  const Outputs plain = run(c, c.params(), in.q, in.k, in.v, in.dout);
  AttentionParams p = c.params();
  p.first_key = upload(documents(c, {{}, {}}));
  const Outputs zero = run(c, p, in.q, in.k, in.v, in.dout);
  EXPECT_TRUE(bitwise_equal(zero.out, plain.out));
  EXPECT_TRUE(bitwise_equal(zero.lse, plain.lse));
  EXPECT_TRUE(bitwise_equal(zero.dq, plain.dq));
  EXPECT_TRUE(bitwise_equal(zero.dk, plain.dk));
  EXPECT_TRUE(bitwise_equal(zero.dv, plain.dv));
}

// A packed document gives the same outputs and gradients as the same document alone at the start
// of a sample (what reset_attention_mask is for); checked in fp64 where the sums are exact enough.
TEST_P(AttentionFirstKeyTest, PackedDocumentEqualsTheDocumentAlone) {
  const Config packed{1, 100, 100, 2, 2, 8, true};
  const std::int64_t start = 37, length = packed.seq_q - start;
  const Config alone{1, length, length, 2, 2, 8, true};
  const Inputs in = make_inputs(packed, DType::f64, 240);
  AttentionParams p = packed.params();
  p.first_key = upload(documents(packed, {{start - 1}}));
  const Outputs whole = run(packed, p, in.q, in.k, in.v, in.dout);
  auto tail = [&](const Tensor& t) { return t.slice(1, start, length).contiguous(); };
  const Outputs part =
      run(alone, alone.params(), tail(in.q), tail(in.k), tail(in.v), tail(in.dout));
  const Tolerance tol{1e-12, 1e-12};
  EXPECT_TRUE(all_close(tail(whole.out), part.out, tol));
  EXPECT_TRUE(all_close(tail(whole.dq), part.dq, tol));
  EXPECT_TRUE(all_close(tail(whole.dk), part.dk, tol));
  EXPECT_TRUE(all_close(tail(whole.dv), part.dv, tol));
}

// A query whose first key is past every key it could see gets zeros, lse -inf, no NaN.
TEST_P(AttentionFirstKeyTest, QueriesThatSeeNoKeyGiveZeros) {
  const Config c{2, 70, 70, 2, 2, 8, true};
  std::vector<std::int32_t> first(static_cast<std::size_t>(c.batch * c.seq_q), 0);
  for (std::int64_t i = 0; i < c.seq_q; ++i) {
    first[static_cast<std::size_t>(c.seq_q + i)] =
        static_cast<std::int32_t>(i % 3 == 0 ? i + 1 : 0);
  }
  const Case k{"first key after the query", c, Tensor::from(first, {c.batch, c.seq_q}), Tensor()};
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Inputs in = make_inputs(c, dtype, 250);
    const AttentionParams p = params_with(k);
    const Outputs o = run(c, p, in.q, in.k, in.v, in.dout);
    expect_matches(o, reference_of(k, p, in), c, dtype);
    const auto lse = o.lse.to_vector<double>();
    const Index at{c};
    for (std::int64_t h = 0; h < c.heads_q; ++h) {
      for (std::int64_t i = 0; i < c.seq_q; ++i)
        EXPECT_EQ(std::isinf(lse[at.row(1, h, i)]), i % 3 == 0) << "h " << h << " i " << i;
    }
  }
}

// Central finite differences of loss = sum(out * w) in fp64.
TEST_P(AttentionFirstKeyTest, GradientsMatchFiniteDifferences) {
  const Config gqa{2, 9, 9, 4, 2, 5, true, 0.25f};
  const Config bidirectional{1, 7, 7, 2, 2, 4, false, 0.0f};
  const std::vector<Case> cases = {
      {"causal, GQA, dropout", gqa, documents(gqa, {{2, 5}, {0}}), Tensor()},
      {"bidirectional", bidirectional, documents(bidirectional, {{3}}), Tensor()}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what + ": " + k.c.name());
    expect_gradients_match_finite_differences(k.c, params_with(k),
                                              make_inputs(k.c, DType::f64, 260), 1000);
  }
}

TEST_P(AttentionFirstKeyTest, DeterministicAcrossRunsAndThreadCounts) {
  const Config two_pass{2, 200, 200, 4, 2, 64, true, 0.1f};
  const Config fused{4, 130, 130, 4, 2, 64, true, 0.0f};
  const std::vector<Case> cases = {
      {"two-pass backward", two_pass, documents(two_pass, {{99}, every(45, 200)}), Tensor()},
      {"dq fused into the dk/dv pass", fused, documents(fused, {{1}, {64}, {}, every(9, 130)}),
       Tensor()}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what + ": " + k.c.name());
    const Inputs in = make_inputs(k.c, DType::f32, 270);
    const AttentionParams p = params_with(k);
    expect_same_bits_for_any_thread_count(k.c, p, in);
  }
}

TEST_P(AttentionFirstKeyTest, EveryCpuInstructionSetVariantMatchesReference) {
  if (GetParam() != "cpu") GTEST_SKIP() << "instruction-set variants exist on the CPU backend only";
  for_each_cpu_attention_isa(
      [&](const std::string&) { check_cases(conformance_cases(0.1f), 280); });
}

TEST_P(AttentionFirstKeyTest, RejectsBadFirstKeys) {
  const Config c{2, 4, 6, 4, 2, 8, true};
  const Tensor q = upload(random_tensor(c.q_shape(), DType::f32, 1));
  const Tensor k = upload(random_tensor(c.kv_shape(), DType::f32, 2));
  const Tensor v = upload(random_tensor(c.kv_shape(), DType::f32, 3));
  Tensor out = empty(c.q_shape(), DType::f32), lse = empty(c.lse_shape(), DType::f32);
  const std::string here = device().str();
  auto forward_with = [&](const Tensor& first) {
    AttentionParams p = c.params();
    p.first_key = first;
    be().attention_forward(q, k, v, p, out, lse);
  };
  const std::vector<std::int32_t> zeros(12, 0);
  expect_error_message(
      [&] {
        forward_with(upload(Tensor::from(std::vector<std::uint8_t>(8, 0), {2, 4})));
      },
      "attention_forward: first_key must be int32, got uint8[2, 4] on " + here);
  expect_error_message(
      [&] {
        forward_with(upload(Tensor::from(zeros, {2, 6})));
      },
      "attention_forward: first_key must have shape [2, 4] (batch of q, queries of q), got "
      "int32[2, 6] on " +
          here);
}

MEGATRON_INSTANTIATE_BACKENDS(AttentionFirstKeyTest);

}  // namespace
}  // namespace megatron::testing
