// CPU Mamba-2 SSD scan (state-space duality), chunked: per chunk an intra-chunk quadratic form
// plus the state carried in from earlier chunks, so time grows linearly with the sequence and
// backward keeps one state per chunk. Work is split over (sample, head) pairs, each computed by
// one thread in a fixed order; the head-shared B and C gradients and the parameter gradients are
// then summed in a fixed order, so results do not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rows.h"
#include "backend/op_argument_checks.h"

namespace megatron::cpu {

namespace {

// Element (b, t, h, 0) of a (Bt, S, H, X) view whose last dimension is contiguous (also used for
// (Bt, S, H) with X = 1).
template <typename T>
struct TokenView {
  T* base;
  std::int64_t sb, st, sh;
  explicit TokenView(const Tensor& t)
      : base(t.numel() ? t.template data<std::remove_const_t<T>>() : nullptr),
        sb(t.stride(0)),
        st(t.stride(1)),
        sh(t.dim() > 2 ? t.stride(2) : 0) {}
  T* at(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return base + b * sb + t * st + h * sh;
  }
};

template <typename T>
T dot(const T* a, const T* b, std::int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (std::int64_t i = 0; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

template <typename T>
void axpy(T alpha, const T* x, T* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

// Triton's softplus in mamba_ssm's dt path: x itself above 20, where log1p(exp(x)) == x in f32.
template <typename T>
T softplus(T v) {
  return v > T(20) ? v : std::log1p(std::exp(v));
}
template <typename T>
T softplus_grad(T v) {
  return v > T(20) ? T(1) : T(1) / (T(1) + std::exp(-v));
}

struct Dims {
  std::int64_t batch, seq, heads, head_dim, groups, state, chunk, chunks;
  std::int64_t group_of(std::int64_t h) const { return h / (heads / groups); }
};

Dims dims_of(const Backend::SsdScan& s) {
  Dims d{};
  d.batch = s.x.size(0);
  d.seq = s.x.size(1);
  d.heads = s.x.size(2);
  d.head_dim = s.x.size(3);
  d.groups = s.B.size(2);
  d.state = s.B.size(3);
  d.chunk = s.chunk_size;
  d.chunks = (d.seq + d.chunk - 1) / d.chunk;
  return d;
}

// One chunk's discretisation: dt_i = softplus(raw + bias), L_i = A * (dt_0 + ... + dt_i).
template <typename T>
void discretise(const TokenView<const T>& dt, std::int64_t b, std::int64_t h, std::int64_t t0,
                std::int64_t len, T bias, T A, T* dts, T* cum, T* slope) {
  T run = 0;
  for (std::int64_t i = 0; i < len; ++i) {
    const T raw = *dt.at(b, t0 + i, h) + bias;
    dts[i] = softplus(raw);
    if (slope) slope[i] = softplus_grad(raw);
    run += dts[i] * A;
    cum[i] = run;
  }
}

template <typename T>
void scan_forward(const Backend::SsdScan& s, Tensor& y, Tensor& chunk_states) {
  const Dims d = dims_of(s);
  const TokenView<const T> x(s.x), dt(s.dt), B(s.B), C(s.C);
  const TokenView<T> out(y);
  const T *A_log = s.A_log.data<T>(), *D = s.D.data<T>(), *dt_bias = s.dt_bias.data<T>();
  T* states = chunk_states.numel() ? chunk_states.data<T>() : nullptr;
  const std::int64_t P = d.head_dim, N = d.state, pairs = d.batch * d.heads;
#pragma omp parallel for schedule(dynamic, 1) if (pairs > 1)
  for (std::int64_t pair = 0; pair < pairs; ++pair) {
    const std::int64_t b = pair / d.heads, h = pair % d.heads, g = d.group_of(h);
    const T A = -std::exp(A_log[h]);
    std::vector<T> state(static_cast<std::size_t>(P * N), T(0));
    std::vector<T> dts(static_cast<std::size_t>(d.chunk)), cum(dts.size());
    std::vector<T> acc(static_cast<std::size_t>(P));
    for (std::int64_t c = 0; c < d.chunks; ++c) {
      const std::int64_t t0 = c * d.chunk, len = std::min(d.chunk, d.seq - t0);
      std::copy(state.begin(), state.end(), states + ((b * d.chunks + c) * d.heads + h) * P * N);
      discretise(dt, b, h, t0, len, dt_bias[h], A, dts.data(), cum.data(),
                 static_cast<T*>(nullptr));
      for (std::int64_t i = 0; i < len; ++i) {
        const T* xi = x.at(b, t0 + i, h);
        const T* Ci = C.at(b, t0 + i, g);
        // From the state entering the chunk: exp(L_i) * state C_i.
        const T decay = std::exp(cum[static_cast<std::size_t>(i)]);
        for (std::int64_t p = 0; p < P; ++p)
          acc[static_cast<std::size_t>(p)] = D[h] * xi[p] + decay * dot(&state[p * N], Ci, N);
        // Within the chunk: (C_i . B_j) exp(L_i - L_j) dt_j x_j for j <= i.
        for (std::int64_t j = 0; j <= i; ++j) {
          const T coef =
              dot(Ci, B.at(b, t0 + j, g), N) *
              std::exp(cum[static_cast<std::size_t>(i)] - cum[static_cast<std::size_t>(j)]) *
              dts[static_cast<std::size_t>(j)];
          axpy(coef, x.at(b, t0 + j, h), acc.data(), P);
        }
        std::copy(acc.begin(), acc.end(), out.at(b, t0 + i, h));
      }
      // The state leaving the chunk.
      const T last = cum[static_cast<std::size_t>(len - 1)];
      const T carry = std::exp(last);
      for (T& v : state)
        v *= carry;
      for (std::int64_t j = 0; j < len; ++j) {
        const T w =
            std::exp(last - cum[static_cast<std::size_t>(j)]) * dts[static_cast<std::size_t>(j)];
        const T* xj = x.at(b, t0 + j, h);
        const T* Bj = B.at(b, t0 + j, g);
        for (std::int64_t p = 0; p < P; ++p)
          axpy(w * xj[p], Bj, &state[p * N], N);
      }
    }
  }
}

// Backward of one (sample, head): chunks in reverse, carrying the gradient of the state leaving
// each chunk. dx and ddt of this head are written in place; its shares of dB and dC go to
// per-head buffers (summed over the group's heads afterwards); parameter sums are returned.
template <typename T>
struct HeadParamGrads {
  T dA = 0, dD = 0, dbias = 0;
};

template <typename T>
HeadParamGrads<T> scan_backward_head(const Dims& d, std::int64_t b, std::int64_t h,
                                     const Backend::SsdScan& s, const TokenView<const T>& x,
                                     const TokenView<const T>& dt, const TokenView<const T>& B,
                                     const TokenView<const T>& C, const TokenView<const T>& dy,
                                     const T* states, const TokenView<T>& dx,
                                     const TokenView<T>& ddt, T* dB_head, T* dC_head) {
  const std::int64_t P = d.head_dim, N = d.state, g = d.group_of(h);
  const T A = -std::exp(s.A_log.data<T>()[h]), Dh = s.D.data<T>()[h];
  const T bias = s.dt_bias.data<T>()[h];
  // dB_head / dC_head: (Bt, S, H, N) buffers; this head's row of token t.
  auto dB_at = [&](std::int64_t t) { return dB_head + ((b * d.seq + t) * d.heads + h) * N; };
  auto dC_at = [&](std::int64_t t) { return dC_head + ((b * d.seq + t) * d.heads + h) * N; };
  HeadParamGrads<T> sums;
  const std::size_t Q = static_cast<std::size_t>(d.chunk);
  std::vector<T> dts(Q), cum(Q), slope(Q), dcum(Q), ddts(Q);
  std::vector<T> grad_out(static_cast<std::size_t>(P * N), T(0));  // d(state leaving the chunk)
  std::vector<T> grad_in(grad_out.size());                         // d(state entering it)
  std::vector<T> v(static_cast<std::size_t>(P));
  for (std::int64_t c = d.chunks - 1; c >= 0; --c) {
    const std::int64_t t0 = c * d.chunk, len = std::min(d.chunk, d.seq - t0);
    const T* entering = states + ((b * d.chunks + c) * d.heads + h) * P * N;
    discretise(dt, b, h, t0, len, bias, A, dts.data(), cum.data(), slope.data());
    std::fill(dcum.begin(), dcum.end(), T(0));
    std::fill(ddts.begin(), ddts.end(), T(0));
    std::fill(grad_in.begin(), grad_in.end(), T(0));
    for (std::int64_t i = 0; i < len; ++i) {
      T* dxi = dx.at(b, t0 + i, h);
      const T* dyi = dy.at(b, t0 + i, h);
      for (std::int64_t p = 0; p < P; ++p)
        dxi[p] = Dh * dyi[p];
      std::fill(dB_at(t0 + i), dB_at(t0 + i) + N, T(0));
      std::fill(dC_at(t0 + i), dC_at(t0 + i) + N, T(0));
    }
    for (std::int64_t i = 0; i < len; ++i) {
      const std::size_t si = static_cast<std::size_t>(i);
      const T* xi = x.at(b, t0 + i, h);
      const T* Ci = C.at(b, t0 + i, g);
      const T* dyi = dy.at(b, t0 + i, h);
      T* dCi = dC_at(t0 + i);
      sums.dD += dot(dyi, xi, P);
      // y_i += exp(L_i) entering C_i.
      const T decay = std::exp(cum[si]);
      for (std::int64_t p = 0; p < P; ++p) {
        const T* row = entering + p * N;
        dcum[si] += decay * dyi[p] * dot(row, Ci, N);
        axpy(decay * dyi[p], row, dCi, N);
        axpy(decay * dyi[p], Ci, grad_in.data() + p * N, N);
      }
      // y_i += sum_{j <= i} (C_i . B_j) exp(L_i - L_j) dt_j x_j.
      for (std::int64_t j = 0; j <= i; ++j) {
        const std::size_t sj = static_cast<std::size_t>(j);
        const T* Bj = B.at(b, t0 + j, g);
        const T G = dot(Ci, Bj, N), M = std::exp(cum[si] - cum[sj]);
        const T K = G * M * dts[sj];
        const T dK = dot(dyi, x.at(b, t0 + j, h), P);
        axpy(K, dyi, dx.at(b, t0 + j, h), P);
        const T dG = dK * M * dts[sj];
        axpy(dG, Bj, dCi, N);
        axpy(dG, Ci, dB_at(t0 + j), N);
        ddts[sj] += dK * G * M;
        dcum[si] += dK * K;
        dcum[sj] -= dK * K;
      }
    }
    // leaving = exp(L_last) entering + sum_j exp(L_last - L_j) dt_j x_j B_j^T.
    const std::size_t last = static_cast<std::size_t>(len - 1);
    const T carry = std::exp(cum[last]);
    T carried = 0;
    for (std::size_t e = 0; e < grad_out.size(); ++e) {
      grad_in[e] += carry * grad_out[e];
      carried += grad_out[e] * entering[e];
    }
    dcum[last] += carry * carried;
    for (std::int64_t j = 0; j < len; ++j) {
      const std::size_t sj = static_cast<std::size_t>(j);
      const T* xj = x.at(b, t0 + j, h);
      const T* Bj = B.at(b, t0 + j, g);
      const T decay = std::exp(cum[last] - cum[sj]), w = decay * dts[sj];
      T* dBj = dB_at(t0 + j);
      for (std::int64_t p = 0; p < P; ++p) {
        v[static_cast<std::size_t>(p)] = dot(grad_out.data() + p * N, Bj, N);
        axpy(w * xj[p], grad_out.data() + p * N, dBj, N);
      }
      axpy(w, v.data(), dx.at(b, t0 + j, h), P);
      const T dw = dot(xj, v.data(), P);
      ddts[sj] += decay * dw;
      dcum[last] += w * dw;
      dcum[sj] -= w * dw;
    }
    // L_i = A * cumsum(dt): the gradient of dt_i collects dL_k for k >= i.
    T run = 0;
    for (std::int64_t i = len - 1; i >= 0; --i) {
      const std::size_t si = static_cast<std::size_t>(i);
      run += dcum[si];
      ddts[si] += run * A;
      sums.dA += run * dts[si];
    }
    for (std::int64_t i = 0; i < len; ++i) {
      const T raw = ddts[static_cast<std::size_t>(i)] * slope[static_cast<std::size_t>(i)];
      *ddt.at(b, t0 + i, h) = raw;
      sums.dbias += raw;
    }
    grad_out.swap(grad_in);
  }
  sums.dA *= A;  // A = -exp(A_log): dA/dA_log = A
  return sums;
}

template <typename T>
void scan_backward(const Tensor& dy_t, const Backend::SsdScan& s, const Tensor& chunk_states,
                   Backend::SsdScanGrads& grads, bool accumulate) {
  const Dims d = dims_of(s);
  const TokenView<const T> x(s.x), dt(s.dt), B(s.B), C(s.C), dy(dy_t);
  const TokenView<T> dx(grads.dx), ddt(grads.ddt), dB(grads.dB), dC(grads.dC);
  const T* states = chunk_states.numel() ? chunk_states.data<T>() : nullptr;
  const std::int64_t pairs = d.batch * d.heads, N = d.state;
  const std::size_t per_token = static_cast<std::size_t>(d.batch * d.seq * d.heads * N);
  std::vector<T> dB_head(per_token), dC_head(per_token);
  std::vector<HeadParamGrads<T>> partial(static_cast<std::size_t>(pairs));
#pragma omp parallel for schedule(dynamic, 1) if (pairs > 1)
  for (std::int64_t pair = 0; pair < pairs; ++pair) {
    partial[static_cast<std::size_t>(pair)] =
        scan_backward_head<T>(d, pair / d.heads, pair % d.heads, s, x, dt, B, C, dy, states, dx,
                              ddt, dB_head.data(), dC_head.data());
  }
  // dB, dC of group g: its heads' shares in head order.
  const std::int64_t per_group = d.heads / d.groups, tokens = d.batch * d.seq;
#pragma omp parallel for schedule(static) if (tokens * d.heads * N >= kParallelElements)
  for (std::int64_t r = 0; r < tokens; ++r) {
    const std::int64_t b = r / d.seq, t = r % d.seq;
    for (std::int64_t g = 0; g < d.groups; ++g) {
      T* outB = dB.at(b, t, g);
      T* outC = dC.at(b, t, g);
      std::fill(outB, outB + N, T(0));
      std::fill(outC, outC + N, T(0));
      for (std::int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
        const std::size_t at = static_cast<std::size_t>((r * d.heads + h) * N);
        axpy(T(1), dB_head.data() + at, outB, N);
        axpy(T(1), dC_head.data() + at, outC, N);
      }
    }
  }
  T *dA_log = grads.dA_log.data<T>(), *dD = grads.dD.data<T>(), *dbias = grads.ddt_bias.data<T>();
  for (std::int64_t h = 0; h < d.heads; ++h) {
    HeadParamGrads<T> total;
    for (std::int64_t b = 0; b < d.batch; ++b) {
      const HeadParamGrads<T>& p = partial[static_cast<std::size_t>(b * d.heads + h)];
      total.dA += p.dA;
      total.dD += p.dD;
      total.dbias += p.dbias;
    }
    dA_log[h] = accumulate ? dA_log[h] + total.dA : total.dA;
    dD[h] = accumulate ? dD[h] + total.dD : total.dD;
    dbias[h] = accumulate ? dbias[h] + total.dbias : total.dbias;
  }
}

}  // namespace

void CpuBackend::ssd_scan_forward(const SsdScan& scan, Tensor& y, Tensor& chunk_states) {
  constexpr const char* op = "ssd_scan_forward";
  ops::check_ssd_scan_args(op, scan, chunk_states, device());
  ops::check_float_view(op, "y", y, scan.x, "x", device());
  ops::check_same_shape(op, "y", y, "x", scan.x);
  dispatch_float(op, scan.x.dtype(), [&]<typename T>() { scan_forward<T>(scan, y, chunk_states); });
}

void CpuBackend::ssd_scan_recurrent(const SsdScan& scan, Tensor& state, Tensor& y) {
  constexpr const char* op = "ssd_scan_recurrent";
  ops::check_ssd_scan_operands(op, scan, device());
  ops::check_ssd_state(op, scan, state, device());
  ops::check_float_view(op, "y", y, scan.x, "x", device());
  ops::check_same_shape(op, "y", y, "x", scan.x);
  dispatch_float(op, scan.x.dtype(), [&]<typename T>() {
    const Dims d = dims_of(scan);
    const TokenView<const T> x(scan.x), dt(scan.dt), B(scan.B), C(scan.C);
    const TokenView<T> out(y);
    const T* A_log = scan.A_log.data<T>();
    const T* D = scan.D.data<T>();
    const T* bias = scan.dt_bias.data<T>();
    T* states = state.data<T>();
    const std::int64_t P = d.head_dim, N = d.state;
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t b = 0; b < d.batch; ++b) {
      for (std::int64_t h = 0; h < d.heads; ++h) {
        T* st = states + ((b * d.heads + h) * P) * N;
        const std::int64_t g = d.group_of(h);
        const T A = -std::exp(A_log[h]);
        for (std::int64_t t = 0; t < d.seq; ++t) {
          const T step = softplus(*dt.at(b, t, h) + bias[h]);
          const T decay = std::exp(step * A);
          const T* xt = x.at(b, t, h);
          const T* Bt = B.at(b, t, g);
          const T* Ct = C.at(b, t, g);
          T* yt = out.at(b, t, h);
          for (std::int64_t p = 0; p < P; ++p) {  // state_t = decay state + dt x_t B_t^T
            T* row = st + p * N;
            for (std::int64_t n = 0; n < N; ++n)
              row[n] = decay * row[n] + step * xt[p] * Bt[n];
            yt[p] = dot(row, Ct, N) + D[h] * xt[p];
          }
        }
      }
    }
  });
}

void CpuBackend::ssd_scan_backward(const Tensor& dy, const SsdScan& scan,
                                   const Tensor& chunk_states, SsdScanGrads& grads,
                                   bool accumulate_params) {
  constexpr const char* op = "ssd_scan_backward";
  ops::check_ssd_scan_args(op, scan, chunk_states, device());
  ops::check_ssd_scan_grads(op, dy, scan, grads, device());
  dispatch_float(op, scan.x.dtype(), [&]<typename T>() {
    scan_backward<T>(dy, scan, chunk_states, grads, accumulate_params);
  });
}

}  // namespace megatron::cpu
