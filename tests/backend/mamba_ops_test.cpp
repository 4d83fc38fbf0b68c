// Mamba-2's ops on every backend: the causal depthwise conv1d + SiLU, the chunked SSD scan and the
// gated RMSNorm against plain fp64 definitions (the scan against the step-by-step recurrence, for
// chunk sizes that do and do not divide the sequence), on strided views like the mixer's; fp64
// finite-difference gradients of every input; parameter-gradient accumulation; the per-chunk
// states backward keeps; determinism across thread counts; argument errors.
#include <cmath>
#include <vector>

#include "backend_test_util.h"

namespace megatron::testing {
namespace {

using MambaOpsTest = BackendTest;
MEGATRON_INSTANTIATE_BACKENDS(MambaOpsTest);

double silu(double v) {
  return v / (1 + std::exp(-v));
}

// ---- causal conv1d ----------------------------------------------------------------------------

// x (B, S, C) as a permuted view of an (S, B, C + 3) buffer, like the mixer's slice of in_proj.
struct ConvCase {
  std::int64_t batch = 2, seq = 7, channels = 5, kernel = 4;
};

Tensor sequence_major_view(const Tensor& buffer, std::int64_t offset, std::int64_t channels) {
  return buffer.slice(2, offset, channels).permute({1, 0, 2});
}

std::vector<double> conv_reference(const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& bias, const ConvCase& c) {
  std::vector<double> y(x.size());
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t t = 0; t < c.seq; ++t)
      for (std::int64_t ch = 0; ch < c.channels; ++ch) {
        double pre = bias[ch];
        for (std::int64_t k = 0; k < c.kernel; ++k) {
          const std::int64_t s = t - (c.kernel - 1) + k;
          if (s >= 0) pre += w[ch * c.kernel + k] * x[(b * c.seq + s) * c.channels + ch];
        }
        y[(b * c.seq + t) * c.channels + ch] = silu(pre);
      }
  return y;
}

TEST_P(MambaOpsTest, Conv1dMatchesDefinitionOnStridedViews) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const ConvCase c :
         {ConvCase{}, ConvCase{1, 2, 3, 4}, ConvCase{3, 40, 70, 4}, ConvCase{2, 5, 4, 1}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " S=" + std::to_string(c.seq));
      const Tensor buffer = upload(random_tensor({c.seq, c.batch, c.channels + 3}, dtype, 1));
      const Tensor x = sequence_major_view(buffer, 2, c.channels);
      const Tensor w = upload(random_tensor({c.channels, c.kernel}, dtype, 2, -0.5f, 0.5f));
      const Tensor bias = upload(random_tensor({c.channels}, dtype, 3, -0.5f, 0.5f));
      Tensor y_buffer = empty({c.seq, c.batch, c.channels}, dtype);
      Tensor y = y_buffer.permute({1, 0, 2});
      be().causal_conv1d_silu_forward(x, w, bias, y);
      const Tensor xc = download(x).contiguous();
      const auto expected = conv_reference(xc.to_vector<double>(), download(w).to_vector<double>(),
                                           download(bias).to_vector<double>(), c);
      EXPECT_TRUE(all_close(download(y).contiguous(),
                            Tensor::from(expected, {c.batch, c.seq, c.channels}).to(dtype),
                            tolerance_for(dtype)));
    }
  }
}

TEST_P(MambaOpsTest, Conv1dGradientsMatchFiniteDifferences) {
  const ConvCase c{2, 9, 6, 4};
  Tensor x = random_tensor({c.batch, c.seq, c.channels}, DType::f64, 4);
  Tensor w = random_tensor({c.channels, c.kernel}, DType::f64, 5, -0.5f, 0.5f);
  Tensor bias = random_tensor({c.channels}, DType::f64, 6, -0.5f, 0.5f);
  const Tensor weights = random_tensor({c.batch, c.seq, c.channels}, DType::f64, 7);
  auto loss = [&] {
    Tensor y = empty(x.shape(), DType::f64);
    be().causal_conv1d_silu_forward(upload(x), upload(w), upload(bias), y);
    return weighted_sum(download(y), weights);
  };
  Tensor dx = empty(x.shape(), DType::f64), dw = empty(w.shape(), DType::f64),
         db = empty(bias.shape(), DType::f64);
  be().causal_conv1d_silu_backward(upload(weights), upload(x), upload(w), upload(bias), dx, dw, db,
                                   false);
  EXPECT_TRUE(gradient_matches(loss, x, download(dx)));
  EXPECT_TRUE(gradient_matches(loss, w, download(dw)));
  EXPECT_TRUE(gradient_matches(loss, bias, download(db)));
  // Accumulation adds the same gradients again.
  be().causal_conv1d_silu_backward(upload(weights), upload(x), upload(w), upload(bias), dx, dw, db,
                                   true);
  Tensor twice = download(db);
  Tensor once = download(db);
  host().scale(once, 0.5);
  be().causal_conv1d_silu_backward(upload(weights), upload(x), upload(w), upload(bias), dx, dw, db,
                                   false);
  EXPECT_TRUE(all_close(download(db), once, {1e-12, 1e-12}));
  EXPECT_FALSE(bitwise_equal(twice, download(db)));
}

// ---- SSD scan ----------------------------------------------------------------------------------

struct ScanCase {
  std::int64_t batch = 2, seq = 11, heads = 4, head_dim = 3, groups = 2, state = 5, chunk = 4;
};

struct ScanTensors {
  Tensor x, dt, B, C, A_log, D, dt_bias;
};

ScanTensors random_scan(const ScanCase& c, DType dtype, std::uint64_t seed) {
  ScanTensors s;
  s.x = random_tensor({c.batch, c.seq, c.heads, c.head_dim}, dtype, seed);
  s.dt = random_tensor({c.batch, c.seq, c.heads}, dtype, seed + 1, -3.0f, 1.0f);
  s.B = random_tensor({c.batch, c.seq, c.groups, c.state}, dtype, seed + 2);
  s.C = random_tensor({c.batch, c.seq, c.groups, c.state}, dtype, seed + 3);
  s.A_log = random_tensor({c.heads}, dtype, seed + 4, 0.0f, 2.5f);
  s.D = random_tensor({c.heads}, dtype, seed + 5, 0.5f, 1.5f);
  s.dt_bias = random_tensor({c.heads}, dtype, seed + 6, -2.0f, 0.0f);
  return s;
}

// The recurrence, one token at a time, in fp64; `boundary_states` gets the state entering each
// chunk.
std::vector<double> recurrence(const ScanTensors& s, const ScanCase& c,
                               std::vector<double>* boundary_states = nullptr) {
  const auto x = s.x.to_vector<double>(), dt = s.dt.to_vector<double>();
  const auto B = s.B.to_vector<double>(), C = s.C.to_vector<double>();
  const auto A_log = s.A_log.to_vector<double>(), D = s.D.to_vector<double>();
  const auto bias = s.dt_bias.to_vector<double>();
  const std::int64_t P = c.head_dim, N = c.state, chunks = (c.seq + c.chunk - 1) / c.chunk;
  std::vector<double> y(x.size());
  if (boundary_states) boundary_states->assign(c.batch * chunks * c.heads * P * N, 0.0);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const std::int64_t g = h / (c.heads / c.groups);
      const double A = -std::exp(A_log[h]);
      std::vector<double> state(P * N, 0.0);
      for (std::int64_t t = 0; t < c.seq; ++t) {
        if (boundary_states && t % c.chunk == 0) {
          std::copy(state.begin(), state.end(),
                    boundary_states->begin() + ((b * chunks + t / c.chunk) * c.heads + h) * P * N);
        }
        const double raw = dt[(b * c.seq + t) * c.heads + h] + bias[h];
        const double step = std::log1p(std::exp(raw));
        const double* xt = &x[((b * c.seq + t) * c.heads + h) * P];
        const double* Bt = &B[((b * c.seq + t) * c.groups + g) * N];
        const double* Ct = &C[((b * c.seq + t) * c.groups + g) * N];
        for (std::int64_t p = 0; p < P; ++p) {
          double out = D[h] * xt[p];
          for (std::int64_t n = 0; n < N; ++n) {
            double& v = state[p * N + n];
            v = std::exp(step * A) * v + step * xt[p] * Bt[n];
            out += v * Ct[n];
          }
          y[((b * c.seq + t) * c.heads + h) * P + p] = out;
        }
      }
    }
  return y;
}

Backend::SsdScan scan_args(const ScanTensors& s, std::int64_t chunk) {
  return {s.x, s.dt, s.B, s.C, s.A_log, s.D, s.dt_bias, chunk};
}

std::int64_t chunks_of(const ScanCase& c) {
  return (c.seq + c.chunk - 1) / c.chunk;
}

TEST_P(MambaOpsTest, ScanEqualsTheRecurrenceForEveryChunkSize) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (std::int64_t chunk : {1, 3, 4, 11, 16}) {
      ScanCase c;
      c.chunk = chunk;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " chunk " + std::to_string(chunk));
      const ScanTensors host_s = random_scan(c, dtype, 10);
      const ScanTensors s{upload(host_s.x),      upload(host_s.dt),    upload(host_s.B),
                          upload(host_s.C),      upload(host_s.A_log), upload(host_s.D),
                          upload(host_s.dt_bias)};
      Tensor y = empty(s.x.shape(), dtype);
      Tensor states = empty({c.batch, chunks_of(c), c.heads, c.head_dim, c.state}, dtype);
      be().ssd_scan_forward(scan_args(s, chunk), y, states);
      std::vector<double> boundaries;
      const auto expected = recurrence(host_s, c, &boundaries);
      const Tolerance tol = dtype == DType::f64 ? Tolerance{1e-11, 1e-11} : Tolerance{2e-5, 2e-5};
      EXPECT_TRUE(all_close(download(y), Tensor::from(expected, s.x.shape()).to(dtype), tol));
      // Backward keeps one state per chunk, the recurrence's state where each chunk begins.
      EXPECT_TRUE(
          all_close(download(states), Tensor::from(boundaries, states.shape()).to(dtype), tol));
    }
  }
}

TEST_P(MambaOpsTest, RecurrentScanContinuesFromItsState) {
  // Incremental decoding: tokens [0, 4) from a zero state, then [4, 11) from the state that
  // left, give the recurrence's outputs, and the state between is the one entering chunk 1.
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    ScanCase c;
    c.chunk = 4;
    const ScanTensors host_s = random_scan(c, dtype, 20);
    std::vector<double> boundaries;
    const auto expected = recurrence(host_s, c, &boundaries);
    const Tolerance tol = dtype == DType::f64 ? Tolerance{1e-11, 1e-11} : Tolerance{2e-5, 2e-5};
    Tensor state = empty({c.batch, c.heads, c.head_dim, c.state}, dtype);
    be().fill(state, 0.0);
    Tensor y = empty({c.batch, c.seq, c.heads, c.head_dim}, dtype);
    for (const auto& [start, length] : {std::pair<std::int64_t, std::int64_t>{0, 4}, {4, 7}}) {
      auto part = [&](const Tensor& t) { return upload(t.slice(1, start, length).contiguous()); };
      Backend::SsdScan scan{
          part(host_s.x),       part(host_s.dt),  part(host_s.B),         part(host_s.C),
          upload(host_s.A_log), upload(host_s.D), upload(host_s.dt_bias), 1};
      Tensor y_part = y.slice(1, start, length);
      be().ssd_scan_recurrent(scan, state, y_part);
      if (start == 0) {
        const Tensor want =
            Tensor::from(boundaries, {c.batch, chunks_of(c), c.heads, c.head_dim, c.state})
                .select(1, 1)
                .contiguous()
                .to(dtype);
        EXPECT_TRUE(all_close(download(state), want, tol)) << "the state after 4 tokens";
      }
    }
    EXPECT_TRUE(all_close(download(y), Tensor::from(expected, y.shape()).to(dtype), tol));
    const ScanTensors dev{upload(host_s.x),      upload(host_s.dt),    upload(host_s.B),
                          upload(host_s.C),      upload(host_s.A_log), upload(host_s.D),
                          upload(host_s.dt_bias)};
    Tensor wrong_state = empty({c.batch, c.heads, c.head_dim, c.state + 1}, dtype);
    EXPECT_THROW(be().ssd_scan_recurrent(scan_args(dev, 1), wrong_state, y), Error);
  }
}

TEST_P(MambaOpsTest, ScanOnMixerViews) {
  // x, B, C and dt as strided views into one (S, B, width) buffer, the way the mixer passes them.
  const ScanCase c{2, 9, 4, 3, 2, 5, 4};
  const std::int64_t xw = c.heads * c.head_dim, bw = c.groups * c.state;
  const std::int64_t width = xw + 2 * bw + c.heads + 1;
  const Tensor buffer = upload(random_tensor({c.seq, c.batch, width}, DType::f64, 20, -1, 1));
  auto view = [&](std::int64_t offset, std::int64_t outer, std::int64_t inner) {
    return buffer.slice(2, offset, outer * inner).permute({1, 0, 2}).unflatten(2, outer, inner);
  };
  ScanTensors s;
  s.x = view(0, c.heads, c.head_dim);
  s.B = view(xw, c.groups, c.state);
  s.C = view(xw + bw, c.groups, c.state);
  s.dt = buffer.slice(2, xw + 2 * bw, c.heads).permute({1, 0, 2});
  const ScanTensors p = random_scan(c, DType::f64, 21);
  s.A_log = upload(p.A_log);
  s.D = upload(p.D);
  s.dt_bias = upload(p.dt_bias);
  Tensor y = empty({c.batch, c.seq, c.heads, c.head_dim}, DType::f64);
  Tensor states = empty({c.batch, chunks_of(c), c.heads, c.head_dim, c.state}, DType::f64);
  be().ssd_scan_forward(scan_args(s, c.chunk), y, states);
  const ScanTensors host_s{download(s.x).contiguous(),
                           download(s.dt).contiguous(),
                           download(s.B).contiguous(),
                           download(s.C).contiguous(),
                           p.A_log,
                           p.D,
                           p.dt_bias};
  EXPECT_TRUE(
      all_close(download(y), Tensor::from(recurrence(host_s, c), y.shape()), {1e-11, 1e-11}));
}

TEST_P(MambaOpsTest, ScanGradientsMatchFiniteDifferences) {
  for (std::int64_t chunk : {3, 16}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    ScanCase c{2, 7, 4, 2, 2, 3, chunk};
    ScanTensors s = random_scan(c, DType::f64, 30);
    const Tensor weights = random_tensor(s.x.shape(), DType::f64, 31);
    const Shape states_shape{c.batch, chunks_of(c), c.heads, c.head_dim, c.state};
    auto loss = [&] {
      const ScanTensors d{upload(s.x),     upload(s.dt), upload(s.B),      upload(s.C),
                          upload(s.A_log), upload(s.D),  upload(s.dt_bias)};
      Tensor y = empty(s.x.shape(), DType::f64), states = empty(states_shape, DType::f64);
      be().ssd_scan_forward(scan_args(d, chunk), y, states);
      return weighted_sum(download(y), weights);
    };
    const ScanTensors d{upload(s.x),     upload(s.dt), upload(s.B),      upload(s.C),
                        upload(s.A_log), upload(s.D),  upload(s.dt_bias)};
    Tensor y = empty(s.x.shape(), DType::f64), states = empty(states_shape, DType::f64);
    be().ssd_scan_forward(scan_args(d, chunk), y, states);
    Backend::SsdScanGrads g{empty(s.x.shape(), DType::f64),      empty(s.dt.shape(), DType::f64),
                            empty(s.B.shape(), DType::f64),      empty(s.C.shape(), DType::f64),
                            empty(s.A_log.shape(), DType::f64),  empty(s.D.shape(), DType::f64),
                            empty(s.dt_bias.shape(), DType::f64)};
    be().ssd_scan_backward(upload(weights), scan_args(d, chunk), states, g, false);
    EXPECT_TRUE(gradient_matches(loss, s.x, download(g.dx)));
    EXPECT_TRUE(gradient_matches(loss, s.dt, download(g.ddt)));
    EXPECT_TRUE(gradient_matches(loss, s.B, download(g.dB)));
    EXPECT_TRUE(gradient_matches(loss, s.C, download(g.dC)));
    EXPECT_TRUE(gradient_matches(loss, s.A_log, download(g.dA_log)));
    EXPECT_TRUE(gradient_matches(loss, s.D, download(g.dD)));
    EXPECT_TRUE(gradient_matches(loss, s.dt_bias, download(g.ddt_bias)));
    // Parameter gradients accumulate; activation gradients are overwritten.
    const Tensor dA_once = download(g.dA_log), dx_once = download(g.dx);
    be().ssd_scan_backward(upload(weights), scan_args(d, chunk), states, g, true);
    Tensor dA_twice = dA_once.clone();
    host().scale(dA_twice, 2.0);
    EXPECT_TRUE(all_close(download(g.dA_log), dA_twice, {1e-12, 1e-12}));
    EXPECT_TRUE(bitwise_equal(download(g.dx), dx_once));
  }
}

TEST_P(MambaOpsTest, ScanIsDeterministicAcrossThreadCounts) {
  const ScanCase c{3, 37, 4, 8, 2, 16, 8};
  const ScanTensors h = random_scan(c, DType::f32, 40);
  const ScanTensors s{upload(h.x),     upload(h.dt), upload(h.B),      upload(h.C),
                      upload(h.A_log), upload(h.D),  upload(h.dt_bias)};
  const Tensor dy = upload(random_tensor(h.x.shape(), DType::f32, 41));
  auto run = [&](int threads) {
    ScopedThreads scoped(threads);
    Tensor y = empty(h.x.shape(), DType::f32);
    Tensor states = empty({c.batch, chunks_of(c), c.heads, c.head_dim, c.state}, DType::f32);
    be().ssd_scan_forward(scan_args(s, c.chunk), y, states);
    Backend::SsdScanGrads g{empty(h.x.shape(), DType::f32),      empty(h.dt.shape(), DType::f32),
                            empty(h.B.shape(), DType::f32),      empty(h.C.shape(), DType::f32),
                            empty(h.A_log.shape(), DType::f32),  empty(h.D.shape(), DType::f32),
                            empty(h.dt_bias.shape(), DType::f32)};
    be().ssd_scan_backward(dy, scan_args(s, c.chunk), states, g, false);
    return std::vector<Tensor>{download(y),    download(g.dx),     download(g.ddt), download(g.dB),
                               download(g.dC), download(g.dA_log), download(g.dD)};
  };
  const auto one = run(1), two = run(2);
  for (std::size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(bitwise_equal(one[i], two[i])) << "output " << i;
}

TEST_P(MambaOpsTest, ScanRefusesBadArguments) {
  const ScanCase c;
  const ScanTensors h = random_scan(c, DType::f32, 50);
  const ScanTensors s{upload(h.x),     upload(h.dt), upload(h.B),      upload(h.C),
                      upload(h.A_log), upload(h.D),  upload(h.dt_bias)};
  Tensor y = empty(h.x.shape(), DType::f32);
  // One state per token instead of per chunk.
  Tensor per_token = empty({c.batch, c.seq, c.heads, c.head_dim, c.state}, DType::f32);
  EXPECT_THROW(be().ssd_scan_forward(scan_args(s, c.chunk), y, per_token), Error);
  Tensor states = empty({c.batch, chunks_of(c), c.heads, c.head_dim, c.state}, DType::f32);
  EXPECT_THROW(be().ssd_scan_forward(scan_args(s, 0), y, states), Error);
  ScanTensors bad_groups = s;
  bad_groups.B = upload(random_tensor({c.batch, c.seq, 3, c.state}, DType::f32, 51));
  bad_groups.C = bad_groups.B;
  EXPECT_THROW(be().ssd_scan_forward(scan_args(bad_groups, c.chunk), y, states), Error);
}

// ---- gated RMSNorm ------------------------------------------------------------------------------

std::vector<double> gated_norm_reference(const std::vector<double>& x, const std::vector<double>& z,
                                         const std::vector<double>& w, std::int64_t n,
                                         std::int64_t group, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / n; ++r)
    for (std::int64_t g0 = 0; g0 < n; g0 += group) {
      double squares = 0;
      for (std::int64_t i = g0; i < g0 + group; ++i) {
        const double u = x[r * n + i] * silu(z[r * n + i]);
        squares += u * u;
      }
      const double rstd = 1 / std::sqrt(squares / group + eps);
      for (std::int64_t i = g0; i < g0 + group; ++i)
        y[r * n + i] = x[r * n + i] * silu(z[r * n + i]) * rstd * w[i];
    }
  return y;
}

TEST_P(MambaOpsTest, GatedRmsNormMatchesDefinitionOnStridedRows) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const auto& [rows, n, group] :
         std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
             {1, 4, 4}, {6, 12, 4}, {33, 128, 64}, {5, 7, 1}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n));
      // x and z as column slices of one (rows, 2n + 1) buffer, like the mixer's z and y.
      const Tensor buffer = upload(random_tensor({rows, 2 * n + 1}, dtype, 60));
      const Tensor z = buffer.slice(1, 0, n), x = buffer.slice(1, n + 1, n);
      const Tensor w = upload(random_tensor({n}, dtype, 61, 0.5f, 1.5f));
      Tensor y = empty({rows, n}, dtype), rstd = empty({rows, n / group}, dtype);
      be().gated_rmsnorm_forward(x, z, w, group, 1e-5f, y, rstd);
      const auto expected = gated_norm_reference(download(x).contiguous().to_vector<double>(),
                                                 download(z).contiguous().to_vector<double>(),
                                                 download(w).to_vector<double>(), n, group,
                                                 static_cast<double>(1e-5f));
      EXPECT_TRUE(all_close(download(y), Tensor::from(expected, {rows, n}).to(dtype),
                            tolerance_for(dtype)));
    }
  }
}

TEST_P(MambaOpsTest, GatedRmsNormGradientsMatchFiniteDifferences) {
  const std::int64_t rows = 5, n = 12, group = 4;
  Tensor x = random_tensor({rows, n}, DType::f64, 70);
  Tensor z = random_tensor({rows, n}, DType::f64, 71, -2, 2);
  Tensor w = random_tensor({n}, DType::f64, 72, 0.5f, 1.5f);
  const Tensor weights = random_tensor({rows, n}, DType::f64, 73);
  auto loss = [&] {
    Tensor y = empty({rows, n}, DType::f64), rstd = empty({rows, n / group}, DType::f64);
    be().gated_rmsnorm_forward(upload(x), upload(z), upload(w), group, 1e-5f, y, rstd);
    return weighted_sum(download(y), weights);
  };
  Tensor y = empty({rows, n}, DType::f64), rstd = empty({rows, n / group}, DType::f64);
  be().gated_rmsnorm_forward(upload(x), upload(z), upload(w), group, 1e-5f, y, rstd);
  Tensor dx = empty({rows, n}, DType::f64), dz = empty({rows, n}, DType::f64),
         dw = empty({n}, DType::f64);
  be().gated_rmsnorm_backward(upload(weights), upload(x), upload(z), upload(w), group, rstd, dx, dz,
                              dw, false);
  EXPECT_TRUE(gradient_matches(loss, x, download(dx)));
  EXPECT_TRUE(gradient_matches(loss, z, download(dz)));
  EXPECT_TRUE(gradient_matches(loss, w, download(dw)));
  EXPECT_THROW(be().gated_rmsnorm_forward(upload(x), upload(z), upload(w), 5, 1e-5f, y, rstd),
               Error);
}

}  // namespace
}  // namespace megatron::testing
