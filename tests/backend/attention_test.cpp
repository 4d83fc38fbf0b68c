// Conformance of fused attention_forward/backward against a plain fp64 softmax-attention
// reference: causal (bottom-right aligned) and not, Sq == Sk and Sq != Sk, odd sizes, GQA/MQA,
// (S, B, H, D)-permuted views, Philox dropout, lse; gradients against finite differences in fp64;
// the online-softmax merge of two key parts (attention_merge);
// determinism across runs and thread counts; every CPU instruction-set variant; bad arguments.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "backend/cpu/attention_kernels.h"

namespace megatron::testing {
namespace {

const std::vector<Config> kShapes = {
    {1, 1, 1, 1, 1, 8, true},  // a single query and key
    {2, 7, 7, 2, 2, 8, true},  // odd, smaller than a tile
    {2, 7, 7, 2, 2, 8, false},
    {1, 65, 65, 2, 2, 64, true},     // one past a 64-tile
    {1, 130, 130, 1, 1, 64, false},  // three tiles, the last of 2
    {1, 130, 130, 2, 2, 8, true},
    {2, 7, 65, 4, 2, 8, true},     // Sq < Sk, GQA
    {1, 65, 130, 4, 1, 64, true},  // Sq < Sk, MQA
    {1, 65, 130, 4, 1, 64, false},
    {1, 130, 65, 2, 2, 8, true},  // Sq > Sk: the first 65 queries see no key
    {2, 33, 70, 4, 2, 24, true},  // head dim not a multiple of any vector width
};

TEST_P(AttentionTest, ForwardMatchesReference) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Config& c : kShapes) {
      SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)));
      const Inputs in = make_inputs(c, dtype, 10);
      const AttentionParams p = c.params();
      const Outputs o = run(c, p, in.q, in.k, in.v, Tensor());
      const Reference r = reference(c, p, in.q, in.k, in.v);
      EXPECT_TRUE(all_close(o.out, as_tensor(r.out, c.q_shape()), forward_tolerance(dtype)));
      EXPECT_TRUE(lse_close(o.lse, r.lse, forward_tolerance(dtype)));
    }
  }
}

TEST_P(AttentionTest, BackwardMatchesReference) {
  std::vector<Config> configs = kShapes;
  // At least 8 (batch, kv head) pairs: backward accumulates dq in the dk/dv pass.
  configs.push_back({4, 65, 65, 4, 2, 64, true});
  configs.push_back({2, 33, 70, 8, 4, 16, true});
  configs.push_back({2, 70, 33, 4, 4, 8, false});
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Config& c : configs) {
      SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)));
      const Inputs in = make_inputs(c, dtype, 20);
      const AttentionParams p = c.params();
      const Outputs o = run(c, p, in.q, in.k, in.v, in.dout);
      const Reference r = reference(c, p, in.q, in.k, in.v, &in.dout);
      EXPECT_TRUE(all_close(o.dq, as_tensor(r.dq, c.q_shape()), gradient_tolerance(dtype)));
      EXPECT_TRUE(all_close(o.dk, as_tensor(r.dk, c.kv_shape()), gradient_tolerance(dtype)));
      EXPECT_TRUE(all_close(o.dv, as_tensor(r.dv, c.kv_shape()), gradient_tolerance(dtype)));
    }
  }
}

TEST_P(AttentionTest, DropoutUsesTheDocumentedPhiloxStream) {
  const std::vector<Config> configs = {
      {2, 7, 65, 4, 2, 8, true, 0.3f},
      {1, 130, 130, 2, 1, 64, true, 0.1f},
      {4, 33, 33, 2, 2, 16, false, 0.5f},  // 8 pairs: dq fused into the dk/dv pass
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Config& c : configs) {
      SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)));
      const Inputs in = make_inputs(c, dtype, 30);
      const AttentionParams p = c.params();
      const Outputs o = run(c, p, in.q, in.k, in.v, in.dout);
      const Reference r = reference(c, p, in.q, in.k, in.v, &in.dout);
      EXPECT_TRUE(all_close(o.out, as_tensor(r.out, c.q_shape()), forward_tolerance(dtype)));
      EXPECT_TRUE(lse_close(o.lse, r.lse, forward_tolerance(dtype)));  // of undropped scores
      EXPECT_TRUE(all_close(o.dq, as_tensor(r.dq, c.q_shape()), gradient_tolerance(dtype)));
      EXPECT_TRUE(all_close(o.dk, as_tensor(r.dk, c.kv_shape()), gradient_tolerance(dtype)));
      EXPECT_TRUE(all_close(o.dv, as_tensor(r.dv, c.kv_shape()), gradient_tolerance(dtype)));

      // A different offset is a different mask.
      AttentionParams shifted = p;
      shifted.offset += 1000;
      const Outputs other = run(c, shifted, in.q, in.k, in.v, Tensor());
      EXPECT_FALSE(all_close(other.out, o.out, forward_tolerance(dtype)));
    }
  }
}

// Megatron keeps activations as (S, B, H, D): q, k, v, out and all gradients are passed as
// permuted views of such buffers, and a fused QKV buffer gives k and v as slices of one tensor.
TEST_P(AttentionTest, AcceptsPermutedSbhdViews) {
  const Config c{3, 70, 70, 4, 2, 16, true, 0.2f};
  const DType dtype = DType::f32;
  const Inputs in = make_inputs(c, dtype, 40);
  const AttentionParams p = c.params();
  const Reference r = reference(c, p, in.q, in.k, in.v, &in.dout);

  auto sbhd = [&](const Tensor& bshd_host) {  // same values, stored (S, B, H, D)
    return upload(bshd_host.permute({1, 0, 2, 3}).contiguous()).permute({1, 0, 2, 3});
  };
  // k and v side by side in one (S, B, 2 * Hkv, D) buffer.
  Tensor kv_host = Tensor::empty({c.seq_k, c.batch, 2 * c.heads_kv, c.dim}, dtype);
  Tensor k_part = kv_host.slice(2, 0, c.heads_kv),
         v_part = kv_host.slice(2, c.heads_kv, c.heads_kv);
  host().copy(in.k.permute({1, 0, 2, 3}), k_part);
  host().copy(in.v.permute({1, 0, 2, 3}), v_part);
  const Tensor kv = upload(kv_host);
  const Tensor k = kv.slice(2, 0, c.heads_kv).permute({1, 0, 2, 3});
  const Tensor v = kv.slice(2, c.heads_kv, c.heads_kv).permute({1, 0, 2, 3});
  const Tensor q = sbhd(in.q), dout = sbhd(in.dout);
  ASSERT_FALSE(q.is_contiguous());

  auto sbhd_empty = [&](const Shape& bshd_shape) {
    return empty({bshd_shape[1], bshd_shape[0], bshd_shape[2], bshd_shape[3]}, dtype)
        .permute({1, 0, 2, 3});
  };
  Tensor out = sbhd_empty(c.q_shape());
  // lse as a (B, Hq, Sq) view of an (Sq, B, Hq) buffer.
  Tensor lse = empty({c.seq_q, c.batch, c.heads_q}, dtype).permute({1, 2, 0});
  be().attention_forward(q, k, v, p, out, lse);
  EXPECT_TRUE(all_close(download(out), as_tensor(r.out, c.q_shape()), forward_tolerance(dtype)));
  EXPECT_TRUE(lse_close(download(lse), r.lse, forward_tolerance(dtype)));

  Tensor dq = sbhd_empty(c.q_shape()), dk = sbhd_empty(c.kv_shape()), dv = sbhd_empty(c.kv_shape());
  be().attention_backward(dout, q, k, v, out, lse, p, dq, dk, dv);
  EXPECT_TRUE(all_close(download(dq), as_tensor(r.dq, c.q_shape()), gradient_tolerance(dtype)));
  EXPECT_TRUE(all_close(download(dk), as_tensor(r.dk, c.kv_shape()), gradient_tolerance(dtype)));
  EXPECT_TRUE(all_close(download(dv), as_tensor(r.dv, c.kv_shape()), gradient_tolerance(dtype)));
}

// The analytic gradients against central finite differences of loss = sum(out * w), in fp64.
TEST_P(AttentionTest, GradientsMatchFiniteDifferences) {
  const std::vector<Config> configs = {
      {1, 5, 7, 4, 2, 8, true, 0.25f},  // causal, GQA, dropout, Sq < Sk
      {2, 6, 6, 4, 4, 8, true, 0.0f},   // 8 pairs: dq in the dk/dv pass
      {1, 9, 4, 2, 1, 3, true, 0.3f},   // MQA, Sq > Sk (rows that see nothing), odd D
      {2, 4, 5, 2, 2, 5, false, 0.1f},
  };
  for (const Config& c : configs) {
    SCOPED_TRACE(c.name());
    expect_gradients_match_finite_differences(c, c.params(), make_inputs(c, DType::f64, 50));
  }
}

TEST_P(AttentionTest, DeterministicAcrossRunsAndThreadCounts) {
  const std::vector<Config> configs = {
      {1, 200, 200, 4, 2, 64, true, 0.1f},  // two-pass backward
      {4, 130, 150, 4, 2, 64, true, 0.0f},  // dq fused into the dk/dv pass
  };
  for (const Config& c : configs) {
    SCOPED_TRACE(c.name());
    const Inputs in = make_inputs(c, DType::f32, 60);
    const AttentionParams p = c.params();
    expect_same_bits_for_any_thread_count(c, p, in);
  }
}

// The CPU picks AVX-512, AVX2 or SSE2 tile kernels at run time; MEGATRON_CPU_ISA selects a lower
// one, so every variant this machine can run is checked here.
TEST_P(AttentionTest, EveryCpuInstructionSetVariantMatchesReference) {
  if (GetParam() != "cpu") GTEST_SKIP() << "instruction-set variants exist on the CPU backend only";
  const std::string best = cpu::attention::kernels_f32().isa;
  const Config c{2, 70, 70, 4, 2, 24, true, 0.2f};
  const Config fused{4, 40, 50, 4, 2, 32, true, 0.0f};
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    ScopedEnv env("MEGATRON_CPU_ISA", isa);
    const std::string used = cpu::attention::kernels_f32().isa;
    if (used != isa) {
      EXPECT_EQ(used, best) << "a request above the CPU's instruction set gets the best it has";
      continue;
    }
    EXPECT_EQ(std::string(cpu::attention::kernels_f64().isa), isa);
    for (const Config& config : {c, fused}) {
      for (DType dtype : {DType::f32, DType::f64}) {
        SCOPED_TRACE(std::string(isa) + " " + config.name() + " " + std::string(dtype_name(dtype)));
        const Inputs in = make_inputs(config, dtype, 70);
        const AttentionParams p = config.params();
        const Outputs o = run(config, p, in.q, in.k, in.v, in.dout);
        const Reference r = reference(config, p, in.q, in.k, in.v, &in.dout);
        EXPECT_TRUE(all_close(o.out, as_tensor(r.out, config.q_shape()), forward_tolerance(dtype)));
        EXPECT_TRUE(lse_close(o.lse, r.lse, forward_tolerance(dtype)));
        EXPECT_TRUE(all_close(o.dq, as_tensor(r.dq, config.q_shape()), gradient_tolerance(dtype)));
        EXPECT_TRUE(all_close(o.dk, as_tensor(r.dk, config.kv_shape()), gradient_tolerance(dtype)));
        EXPECT_TRUE(all_close(o.dv, as_tensor(r.dv, config.kv_shape()), gradient_tolerance(dtype)));
      }
    }
  }
  {
    ScopedEnv env("MEGATRON_CPU_ISA", "sse9");
    EXPECT_THROW(cpu::attention::kernels_f32(), Error);
  }
}

TEST_P(AttentionTest, EmptySequences) {
  {  // no keys: zero output, lse -inf, zero dq
    const Config c{1, 3, 0, 2, 1, 8, false};
    const AttentionParams p = c.params();
    const Inputs in = make_inputs(c, DType::f32, 80);
    const Outputs o = run(c, p, in.q, in.k, in.v, in.dout);
    EXPECT_TRUE(all_close(o.out, Tensor::zeros(c.q_shape(), DType::f32), {0, 0}));
    for (double x : o.lse.to_vector<double>())
      EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
    EXPECT_TRUE(all_close(o.dq, Tensor::zeros(c.q_shape(), DType::f32), {0, 0}));
  }
  {  // no queries: zero dk and dv
    const Config c{1, 0, 5, 2, 1, 8, true};
    const AttentionParams p = c.params();
    const Inputs in = make_inputs(c, DType::f32, 81);
    const Outputs o = run(c, p, in.q, in.k, in.v, in.dout);
    EXPECT_TRUE(all_close(o.dk, Tensor::zeros(c.kv_shape(), DType::f32), {0, 0}));
    EXPECT_TRUE(all_close(o.dv, Tensor::zeros(c.kv_shape(), DType::f32), {0, 0}));
  }
}

// Runs `fn` and expects an Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    std::string expected;
    for (const std::string& part : parts)
      expected += " '" + part + "'";
    ADD_FAILURE() << "no error thrown; expected one mentioning" << expected;
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "'" << message << "' lacks '" << part << "'";
    }
  }
}

// attention_merge (ring attention's online softmax): attention over the first keys merged with
// attention over the rest equals attention over all of them; a part in which a query sees no key
// (lse -inf: sample 0's second part padded away) leaves it as it was. Both orders.
TEST_P(AttentionTest, MergeOfTwoKeyPartsEqualsAllKeys) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Config c{2, 5, 9, 4, 2, 8, false};
    SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)));
    const Inputs in = make_inputs(c, dtype, 30);
    std::vector<std::uint8_t> padding(static_cast<std::size_t>(c.batch * c.seq_k), 0);
    for (std::int64_t j = 4; j < c.seq_k; ++j)
      padding[static_cast<std::size_t>(j)] = 1;  // sample 0 sees keys 0-3 only
    // The expected: the kernel over all keys (its masks are checked against the fp64 reference
    // in attention_mask_test).
    AttentionParams whole = c.params();
    whole.key_padding_mask = upload(Tensor::from(padding, {c.batch, c.seq_k}));
    const Tensor q = upload(in.q), k = upload(in.k), v = upload(in.v);
    Tensor all_out = empty(c.q_shape(), dtype), all_lse = empty(c.lse_shape(), dtype);
    be().attention_forward(q, k, v, whole, all_out, all_lse);
    for (const bool first_part_first : {true, false}) {
      Tensor out[2], lse[2];
      for (int part = 0; part < 2; ++part) {
        const std::int64_t start = part == 0 ? 0 : 4, len = part == 0 ? 4 : c.seq_k - 4;
        AttentionParams p = c.params();
        p.key_padding_mask =
            upload(Tensor::from(padding, {c.batch, c.seq_k}).slice(1, start, len).contiguous());
        out[part] = empty(c.q_shape(), dtype);
        lse[part] = empty(c.lse_shape(), dtype);
        be().attention_forward(q, k.slice(1, start, len), v.slice(1, start, len), p, out[part],
                               lse[part]);
      }
      const int into = first_part_first ? 0 : 1;
      be().attention_merge(out[into], lse[into], out[1 - into], lse[1 - into]);
      EXPECT_TRUE(all_close(download(out[into]), download(all_out), forward_tolerance(dtype)));
      EXPECT_TRUE(all_close(download(lse[into]), download(all_lse), forward_tolerance(dtype)));
    }
  }
}

TEST_P(AttentionTest, RejectsBadArguments) {
  const Config c{1, 4, 6, 4, 2, 8, true};
  const DType f32 = DType::f32;
  const Tensor q = upload(random_tensor(c.q_shape(), f32, 1));
  const Tensor k = upload(random_tensor(c.kv_shape(), f32, 2));
  const Tensor v = upload(random_tensor(c.kv_shape(), f32, 3));
  Tensor out = empty(c.q_shape(), f32), lse = empty(c.lse_shape(), f32);
  const AttentionParams p = c.params();
  auto forward = [&](const Tensor& q_, const Tensor& k_, const Tensor& v_, Tensor& out_,
                     Tensor& lse_, const AttentionParams& p_) {
    be().attention_forward(q_, k_, v_, p_, out_, lse_);
  };

  const Tensor k3 = upload(random_tensor({1, 6, 3, 8}, f32, 4));
  expect_error([&] { forward(q, k3, k3, out, lse, p); },
               {"attention_forward", "query heads (4)", "key/value heads (3)"});
  const Tensor k64 = upload(random_tensor(c.kv_shape(), DType::f64, 5));
  expect_error([&] { forward(q, k64, v, out, lse, p); },
               {"attention_forward", "k", "float64", "dtype of q"});
  const Tensor k_dim = upload(random_tensor({1, 6, 2, 4}, f32, 6));
  expect_error([&] { forward(q, k_dim, k_dim, out, lse, p); },
               {"attention_forward", "k must have shape"});
  const Tensor v_long = upload(random_tensor({1, 7, 2, 8}, f32, 7));
  expect_error([&] { forward(q, k, v_long, out, lse, p); },
               {"attention_forward", "v", "shape of k"});
  const Tensor q3 = upload(random_tensor({1, 4, 32}, f32, 8));
  expect_error([&] { forward(q3, k, v, out, lse, p); },
               {"attention_forward", "q must have 4 dimensions"});
  const Tensor q_half = upload(random_tensor(c.q_shape(), DType::bf16, 9));
  expect_error([&] { forward(q_half, k, v, out, lse, p); },
               {"attention_forward", "q must be float32 or float64"});
  const Tensor q_strided = upload(random_tensor({1, 4, 8, 4}, f32, 10)).transpose(2, 3);
  expect_error([&] { forward(q_strided, k, v, out, lse, p); },
               {"attention_forward", "q", "contiguous last dimension"});
  Tensor lse_bad = empty({1, 4, 5}, f32);
  expect_error([&] { forward(q, k, v, out, lse_bad, p); },
               {"attention_forward", "lse must have shape [1, 4, 4]"});
  Tensor lse_f64 = empty(c.lse_shape(), DType::f64);
  expect_error([&] { forward(q, k, v, out, lse_f64, p); },
               {"attention_forward", "lse", "dtype of q"});
  Tensor out_bad = empty({1, 4, 4, 4}, f32);
  expect_error([&] { forward(q, k, v, out_bad, lse, p); },
               {"attention_forward", "out", "shape of q"});
  AttentionParams p_drop = p;
  p_drop.dropout_p = 1.0f;
  expect_error([&] { forward(q, k, v, out, lse, p_drop); },
               {"attention_forward", "dropout_p must be in [0, 1)"});
  AttentionParams p_scale = p;
  p_scale.scale = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { forward(q, k, v, out, lse, p_scale); },
               {"attention_forward", "scale must be finite"});

  be().attention_forward(q, k, v, p, out, lse);
  Tensor dq = empty(c.q_shape(), f32), dk = empty(c.kv_shape(), f32), dv = empty(c.kv_shape(), f32);
  Tensor dk_bad = empty(c.q_shape(), f32);
  expect_error([&] { be().attention_backward(out, q, k, v, out, lse, p, dq, dk_bad, dv); },
               {"attention_backward", "dk", "shape of k"});
  const Tensor dout_bad = upload(random_tensor({1, 5, 4, 8}, f32, 11));
  expect_error([&] { be().attention_backward(dout_bad, q, k, v, out, lse, p, dq, dk, dv); },
               {"attention_backward", "dout", "shape of q"});
  expect_error([&] { be().attention_backward(out, q, k, v, out, lse_bad, p, dq, dk, dv); },
               {"attention_backward", "lse must have shape"});
}

MEGATRON_INSTANTIATE_BACKENDS(AttentionTest);

}  // namespace
}  // namespace megatron::testing
