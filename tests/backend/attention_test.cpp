// Conformance of fused attention_forward/backward against a plain fp64 softmax-attention
// reference: causal (bottom-right aligned) and not, Sq == Sk and Sq != Sk, odd sizes, GQA/MQA,
// (S, B, H, D)-permuted views, Philox dropout, lse; gradients against finite differences in fp64;
// determinism across runs and thread counts; every CPU instruction-set variant; bad arguments.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend_test_util.h"
#include "megatron/tensor/philox.h"

namespace megatron::testing {
namespace {

struct Config {
  std::int64_t batch, seq_q, seq_k, heads_q, heads_kv, dim;
  bool causal;
  float dropout = 0;

  std::string name() const {
    return "B" + std::to_string(batch) + " Sq" + std::to_string(seq_q) + " Sk" +
           std::to_string(seq_k) + " Hq" + std::to_string(heads_q) + " Hkv" +
           std::to_string(heads_kv) + " D" + std::to_string(dim) + (causal ? " causal" : "") +
           (dropout > 0 ? " dropout " + std::to_string(dropout) : "");
  }
  AttentionParams params() const {
    AttentionParams p;
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
    p.causal = causal;
    p.dropout_p = dropout;
    p.seed = 1234;
    p.offset = 77;
    return p;
  }
  Shape q_shape() const { return {batch, seq_q, heads_q, dim}; }
  Shape kv_shape() const { return {batch, seq_k, heads_kv, dim}; }
  Shape lse_shape() const { return {batch, heads_q, seq_q}; }
};

// ---- the fp64 reference: the full Sq x Sk softmax, written plainly ------------------------------

struct Reference {
  std::vector<double> out, lse;
  std::vector<double> dq, dk, dv;
};

// Index helpers for logical (B, S, H, D) and (B, H, S) vectors.
struct Index {
  const Config& c;
  std::size_t q(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>(((b * c.seq_q + i) * c.heads_q + h) * c.dim + d);
  }
  std::size_t kv(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>(((b * c.seq_k + j) * c.heads_kv + h) * c.dim + d);
  }
  std::size_t row(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return static_cast<std::size_t>((b * c.heads_q + h) * c.seq_q + i);
  }
};

// The dropout multiplier of element (b, h, i, j) exactly as AttentionParams documents it.
double dropout_multiplier(const Config& c, const AttentionParams& p, std::int64_t b, std::int64_t h,
                          std::int64_t i, std::int64_t j) {
  if (p.dropout_p <= 0) return 1.0;
  const std::uint64_t index =
      static_cast<std::uint64_t>(((b * c.heads_q + h) * c.seq_q + i) * c.seq_k + j);
  return philox_uniform_at(p.seed, p.offset, index) >= p.dropout_p ? 1.0 / (1.0 - p.dropout_p)
                                                                   : 0.0;
}

// Forward (and, given dout, backward) in fp64 over full probability matrices.
Reference reference(const Config& c, const AttentionParams& p, const Tensor& q_t, const Tensor& k_t,
                    const Tensor& v_t, const Tensor* dout_t = nullptr) {
  const auto q = q_t.to_vector<double>(), k = k_t.to_vector<double>(), v = v_t.to_vector<double>();
  std::vector<double> dout;
  if (dout_t) dout = dout_t->to_vector<double>();
  const Index at{c};
  Reference r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(static_cast<std::size_t>(c.batch * c.heads_q * c.seq_q), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  const std::int64_t group = c.heads_q / c.heads_kv;
  std::vector<double> prob(static_cast<std::size_t>(c.seq_k)), dprob(prob.size());
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t h = 0; h < c.heads_q; ++h) {
      const std::int64_t hk = h / group;
      for (std::int64_t i = 0; i < c.seq_q; ++i) {
        const std::int64_t last_key = c.causal ? i + c.seq_k - c.seq_q : c.seq_k - 1;
        double max_score = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < c.seq_k; ++j) {
          double s = 0;
          for (std::int64_t d = 0; d < c.dim; ++d)
            s += q[at.q(b, i, h, d)] * k[at.kv(b, j, hk, d)];
          prob[j] = j <= last_key ? s * p.scale : -std::numeric_limits<double>::infinity();
          max_score = std::max(max_score, prob[j]);
        }
        if (last_key < 0) {  // sees no key: zero output, lse -inf
          r.lse[at.row(b, h, i)] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double sum = 0;
        for (std::int64_t j = 0; j < c.seq_k; ++j) {
          prob[j] = j <= last_key ? std::exp(prob[j] - max_score) : 0.0;
          sum += prob[j];
        }
        r.lse[at.row(b, h, i)] = max_score + std::log(sum);
        for (std::int64_t j = 0; j < c.seq_k; ++j)
          prob[j] /= sum;
        for (std::int64_t j = 0; j < c.seq_k; ++j) {
          const double kept = prob[j] * dropout_multiplier(c, p, b, h, i, j);
          for (std::int64_t d = 0; d < c.dim; ++d) {
            r.out[at.q(b, i, h, d)] += kept * v[at.kv(b, j, hk, d)];
          }
        }
        if (!dout_t) continue;
        // dP = (dO . v_j) * mask; dS = P (dP - sum_j P dP); dq = scale dS k; dk = scale dS q.
        double row_dot = 0;
        for (std::int64_t j = 0; j < c.seq_k; ++j) {
          double dp = 0;
          for (std::int64_t d = 0; d < c.dim; ++d)
            dp += dout[at.q(b, i, h, d)] * v[at.kv(b, j, hk, d)];
          const double m = dropout_multiplier(c, p, b, h, i, j);
          dprob[j] = dp * m;
          row_dot += prob[j] * dprob[j];
          for (std::int64_t d = 0; d < c.dim; ++d) {
            r.dv[at.kv(b, j, hk, d)] += prob[j] * m * dout[at.q(b, i, h, d)];
          }
        }
        for (std::int64_t j = 0; j < c.seq_k; ++j) {
          const double ds = prob[j] * (dprob[j] - row_dot) * p.scale;
          for (std::int64_t d = 0; d < c.dim; ++d) {
            r.dq[at.q(b, i, h, d)] += ds * k[at.kv(b, j, hk, d)];
            r.dk[at.kv(b, j, hk, d)] += ds * q[at.q(b, i, h, d)];
          }
        }
      }
    }
  }
  return r;
}

// ---- running the op -----------------------------------------------------------------------------

class AttentionTest : public BackendTest {
 protected:
  struct Inputs {
    Tensor q, k, v, dout;  // host
  };
  Inputs make_inputs(const Config& c, DType dtype, std::uint64_t seed) const {
    return {random_tensor(c.q_shape(), dtype, seed), random_tensor(c.kv_shape(), dtype, seed + 1),
            random_tensor(c.kv_shape(), dtype, seed + 2),
            random_tensor(c.q_shape(), dtype, seed + 3)};
  }

  struct Outputs {
    Tensor out, lse, dq, dk, dv;  // host copies
  };
  // Forward, and backward with `dout` unless it is undefined, on the backend.
  Outputs run(const Config& c, const AttentionParams& p, const Tensor& q, const Tensor& k,
              const Tensor& v, const Tensor& dout) {
    const DType dtype = q.dtype();
    const Tensor q_dev = upload(q), k_dev = upload(k), v_dev = upload(v);
    Tensor out = empty(c.q_shape(), dtype), lse = empty(c.lse_shape(), dtype);
    be().fill(out, 3.0);  // stale values must be overwritten
    be().attention_forward(q_dev, k_dev, v_dev, p, out, lse);
    Outputs o{download(out), download(lse), {}, {}, {}};
    if (!dout.defined()) return o;
    Tensor dq = empty(c.q_shape(), dtype), dk = empty(c.kv_shape(), dtype),
           dv = empty(c.kv_shape(), dtype);
    be().fill(dq, 5.0), be().fill(dk, 5.0), be().fill(dv, 5.0);
    be().attention_backward(upload(dout), q_dev, k_dev, v_dev, out, lse, p, dq, dk, dv);
    o.dq = download(dq), o.dk = download(dk), o.dv = download(dv);
    return o;
  }
};

Tensor as_tensor(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from(values, shape);
}

// fp32 results are sums of up to D products (scores) and Sk terms (outputs, gradients) rounded
// in fp32; 1e-5 suits forward values of order 1, gradients (up to ~10 in size) get 1e-4.
Tolerance forward_tolerance(DType dtype) {
  return tolerance_for(dtype);
}
Tolerance gradient_tolerance(DType dtype) {
  return dtype == DType::f64 ? Tolerance{1e-11, 1e-11} : Tolerance{1e-4, 1e-4};
}

// lse is -inf for rows that see no key; compare those exactly and the rest with a tolerance.
::testing::AssertionResult lse_close(const Tensor& actual, const std::vector<double>& expected,
                                     Tolerance tol) {
  const auto a = actual.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(expected[i])) {
      if (a[i] != expected[i]) {
        return ::testing::AssertionFailure() << "lse " << i << ": " << a[i] << ", expected -inf";
      }
    } else if (!(std::abs(a[i] - expected[i]) <= tol.atol + tol.rtol * std::abs(expected[i]))) {
      return ::testing::AssertionFailure()
             << "lse " << i << ": " << a[i] << ", expected " << expected[i];
    }
  }
  return ::testing::AssertionSuccess();
}

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
    Inputs in = make_inputs(c, DType::f64, 50);
    const AttentionParams p = c.params();
    const Tensor weights = random_tensor(c.q_shape(), DType::f64, 99);
    auto loss = [&] {
      Tensor out = empty(c.q_shape(), DType::f64), lse = empty(c.lse_shape(), DType::f64);
      be().attention_forward(upload(in.q), upload(in.k), upload(in.v), p, out, lse);
      return weighted_sum(download(out), weights);
    };
    const Outputs o = run(c, p, in.q, in.k, in.v, weights);
    EXPECT_TRUE(gradient_matches(loss, in.q, o.dq, 1e-6));
    EXPECT_TRUE(gradient_matches(loss, in.k, o.dk, 1e-6));
    EXPECT_TRUE(gradient_matches(loss, in.v, o.dv, 1e-6));
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
    std::optional<Outputs> first;
    for (int threads : {2, 2, 1, 2}) {
      ScopedThreads scoped(threads);
      const Outputs o = run(c, p, in.q, in.k, in.v, in.dout);
      if (!first) {
        first = o;
        continue;
      }
      SCOPED_TRACE(std::to_string(threads) + " threads");
      EXPECT_TRUE(bitwise_equal(o.out, first->out));
      EXPECT_TRUE(bitwise_equal(o.lse, first->lse));
      EXPECT_TRUE(bitwise_equal(o.dq, first->dq));
      EXPECT_TRUE(bitwise_equal(o.dk, first->dk));
      EXPECT_TRUE(bitwise_equal(o.dv, first->dv));
    }
  }
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (previous_) {
      setenv(name_, previous_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

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
