// Shared by the fused-attention tests (attention_test.cpp, attention_mask_test.cpp): problem
// configurations, the plain fp64 reference over full Sq x Sk probability matrices (causal, key
// padding, Philox dropout, GQA), a fixture running forward and backward on a backend, and the
// tolerances and lse comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend_test_util.h"
#include "megatron/tensor/philox.h"

namespace megatron::testing {

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
  std::vector<double> dbias;  // (Hq, Sq, Sk), summed over the batch; with a bias only
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
inline double dropout_multiplier(const Config& c, const AttentionParams& p, std::int64_t b,
                                 std::int64_t h, std::int64_t i, std::int64_t j) {
  if (p.dropout_p <= 0) return 1.0;
  const std::uint64_t index =
      static_cast<std::uint64_t>(((b * c.heads_q + h) * c.seq_q + i) * c.seq_k + j);
  return philox_uniform_at(p.seed, p.offset, index) >= p.dropout_p ? 1.0 / (1.0 - p.dropout_p)
                                                                   : 0.0;
}

// Forward (and, given dout, backward) in fp64 over full probability matrices. `padding` is the
// key padding mask as a host (B, Sk) u8 tensor (non-zero = excluded key), or undefined for none;
// `first_key` a host (B, Sq) i32 tensor (query i sees no key before first_key[b, i]), or undefined;
// `bias` a host (Hq, Sq, Sk) tensor added to the scaled scores, or undefined.
inline Reference reference(const Config& c, const AttentionParams& p, const Tensor& q_t,
                           const Tensor& k_t, const Tensor& v_t, const Tensor* dout_t = nullptr,
                           const Tensor& padding = Tensor(), const Tensor& first_key = Tensor(),
                           const Tensor& bias_t = Tensor()) {
  const auto q = q_t.to_vector<double>(), k = k_t.to_vector<double>(), v = v_t.to_vector<double>();
  std::vector<double> dout, pad, first, bias;
  if (dout_t) dout = dout_t->to_vector<double>();
  if (padding.defined()) pad = padding.to_vector<double>();
  if (first_key.defined()) first = first_key.to_vector<double>();
  if (bias_t.defined()) bias = bias_t.to_vector<double>();
  auto bias_of = [&](std::int64_t h, std::int64_t i, std::int64_t j) {
    return bias.empty() ? 0.0 : bias[static_cast<std::size_t>((h * c.seq_q + i) * c.seq_k + j)];
  };
  const Index at{c};
  Reference r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(static_cast<std::size_t>(c.batch * c.heads_q * c.seq_q), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  if (!bias.empty()) r.dbias.assign(bias.size(), 0.0);
  const std::int64_t group = c.heads_q / c.heads_kv;
  const double minus_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> prob(static_cast<std::size_t>(c.seq_k)), dprob(prob.size());
  std::vector<bool> sees(prob.size());
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t h = 0; h < c.heads_q; ++h) {
      const std::int64_t hk = h / group;
      for (std::int64_t i = 0; i < c.seq_q; ++i) {
        const std::int64_t last_key = c.causal ? i + c.seq_k - c.seq_q : c.seq_k - 1;
        bool any = false;
        double max_score = minus_inf;
        for (std::int64_t j = 0; j < c.seq_k; ++j) {
          const bool padded = !pad.empty() && pad[static_cast<std::size_t>(b * c.seq_k + j)] != 0;
          const bool before_first =
              !first.empty() && double(j) < first[static_cast<std::size_t>(b * c.seq_q + i)];
          sees[j] = j <= last_key && !padded && !before_first;
          any = any || sees[j];
          double s = 0;
          for (std::int64_t d = 0; d < c.dim; ++d)
            s += q[at.q(b, i, h, d)] * k[at.kv(b, j, hk, d)];
          prob[j] = sees[j] ? s * p.scale + bias_of(h, i, j) : minus_inf;
          max_score = std::max(max_score, prob[j]);
        }
        if (!any) {  // sees no key: zero output, lse -inf, no gradient
          r.lse[at.row(b, h, i)] = minus_inf;
          continue;
        }
        double sum = 0;
        for (std::int64_t j = 0; j < c.seq_k; ++j) {
          prob[j] = sees[j] ? std::exp(prob[j] - max_score) : 0.0;
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
          const double unscaled = prob[j] * (dprob[j] - row_dot);
          if (!r.dbias.empty())
            r.dbias[static_cast<std::size_t>((h * c.seq_q + i) * c.seq_k + j)] += unscaled;
          const double ds = unscaled * p.scale;
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

  // The analytic dq, dk, dv against central finite differences of loss = sum(out * w) in fp64
  // (`in` is fp64; up to max_checks elements of each).
  void expect_gradients_match_finite_differences(const Config& c, const AttentionParams& p,
                                                 Inputs in, std::int64_t max_checks = 64) {
    const Tensor weights = random_tensor(c.q_shape(), DType::f64, 99);
    auto loss = [&] {
      Tensor out = empty(c.q_shape(), DType::f64), lse = empty(c.lse_shape(), DType::f64);
      be().attention_forward(upload(in.q), upload(in.k), upload(in.v), p, out, lse);
      return weighted_sum(download(out), weights);
    };
    const Outputs o = run(c, p, in.q, in.k, in.v, weights);
    EXPECT_TRUE(gradient_matches(loss, in.q, o.dq, 1e-6, max_checks));
    EXPECT_TRUE(gradient_matches(loss, in.k, o.dk, 1e-6, max_checks));
    EXPECT_TRUE(gradient_matches(loss, in.v, o.dv, 1e-6, max_checks));
  }

  // Forward and backward run with 2, 2, 1 and 2 threads give the bits of the first run.
  void expect_same_bits_for_any_thread_count(const Config& c, const AttentionParams& p,
                                             const Inputs& in) {
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
};

inline Tensor as_tensor(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from(values, shape);
}

// fp32 results are sums of up to D products (scores) and Sk terms (outputs, gradients) rounded
// in fp32; 1e-5 suits forward values of order 1, gradients (up to ~10 in size) get 1e-4.
inline Tolerance forward_tolerance(DType dtype) {
  return tolerance_for(dtype);
}
inline Tolerance gradient_tolerance(DType dtype) {
  return dtype == DType::f64 ? Tolerance{1e-11, 1e-11} : Tolerance{1e-4, 1e-4};
}

// lse is -inf for rows that see no key; compare those exactly and the rest with a tolerance.
inline ::testing::AssertionResult lse_close(const Tensor& actual,
                                            const std::vector<double>& expected, Tolerance tol) {
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

// Runs `check` once per CPU instruction-set variant of the tile kernels this CPU has
// (MEGATRON_CPU_ISA selects a lower one than the best), with the variant's name, and expects the
// best one among them.
template <typename Check>
void for_each_cpu_attention_isa(Check&& check);

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
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

template <typename Check>
void for_each_cpu_attention_isa(Check&& check) {
  const std::string best = cpu::attention::kernels_f32().isa;
  bool ran_best = false;
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    ScopedEnv env("MEGATRON_CPU_ISA", isa);
    const std::string used = cpu::attention::kernels_f32().isa;
    if (used != isa) continue;  // above this CPU: the best it has, checked already
    ran_best = ran_best || used == best;
    SCOPED_TRACE(isa);
    check(std::string(isa));
  }
  EXPECT_TRUE(ran_best) << "the best instruction set, " << best << ", was not run";
}

}  // namespace megatron::testing
