// CPU causal depthwise conv1d with bias and SiLU (Mamba's short convolution), forward and
// backward; parameter gradients are summed in fixed row chunks, so they do not depend on the
// thread count.

// Lets GCC if-convert the selects in sigmoid so the channel loops vectorise.
#pragma GCC optimize("no-trapping-math")

#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rows.h"
#include "backend/op_argument_checks.h"

namespace megatron::cpu {

namespace {

// A (Bt, S, C) view with a contiguous last dimension: element (b, t, 0) of each row.
template <typename T>
struct SequenceView {
  T* base;
  std::int64_t batch_stride, time_stride;
  explicit SequenceView(const Tensor& t)
      : base(t.numel() ? t.template data<std::remove_const_t<T>>() : nullptr),
        batch_stride(t.stride(0)),
        time_stride(t.stride(1)) {}
  T* row(std::int64_t b, std::int64_t t) const { return base + b * batch_stride + t * time_stride; }
};

// The weight transposed to (K, C), so each tap's loop over channels is contiguous.
template <typename T>
std::vector<T> taps_by_channel(const Tensor& weight) {
  const std::int64_t channels = weight.size(0), kernel = weight.size(1);
  const T* w = weight.data<T>();
  std::vector<T> taps(static_cast<std::size_t>(channels * kernel));
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t k = 0; k < kernel; ++k)
      taps[static_cast<std::size_t>(k * channels + c)] = w[c * kernel + k];
  return taps;
}

// pre[c] = bias[c] + sum_k taps[k][c] * x[b, t - (K - 1) + k, c].
template <typename T>
MEGATRON_CPU_CLONES void pre_activation(const SequenceView<const T>& x, const T* taps,
                                        const T* bias, std::int64_t b, std::int64_t t,
                                        std::int64_t channels, std::int64_t kernel, T* pre) {
#pragma omp simd
  for (std::int64_t c = 0; c < channels; ++c)
    pre[c] = bias[c];
  for (std::int64_t k = 0; k < kernel; ++k) {
    const std::int64_t source = t - (kernel - 1) + k;
    if (source < 0) continue;
    const T* xr = x.row(b, source);
    const T* w = taps + k * channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c)
      pre[c] += w[c] * xr[c];
  }
}

template <typename T>
void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  const std::int64_t batch = x.size(0), seq = x.size(1), channels = x.size(2);
  const std::int64_t kernel = weight.size(1), rows = batch * seq;
  const std::vector<T> taps = taps_by_channel<T>(weight);
  const SequenceView<const T> in(x);
  const SequenceView<T> out(y);
  const T* pb = bias.data<T>();
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t b = r / seq, t = r % seq;
    T* yr = out.row(b, t);
    pre_activation(in, taps.data(), pb, b, t, channels, kernel, yr);
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c)
      yr[c] = yr[c] / (T(1) + std::exp(-yr[c]));
  }
}

template <typename T>
void conv_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& bias,
                   Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) {
  const std::int64_t batch = x.size(0), seq = x.size(1), channels = x.size(2);
  const std::int64_t kernel = weight.size(1), rows = batch * seq;
  const std::vector<T> taps = taps_by_channel<T>(weight);
  const SequenceView<const T> in(x), grad(dy);
  const SequenceView<T> out(dx);
  const T* pb = bias.data<T>();
  const bool parallel = rows * channels >= kParallelElements;

  // dpre = dy * silu'(pre), pre recomputed; kept contiguous (row r = b * S + t).
  std::vector<T> dpre(static_cast<std::size_t>(rows * channels));
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t b = r / seq, t = r % seq;
    T* d = dpre.data() + r * channels;
    pre_activation(in, taps.data(), pb, b, t, channels, kernel, d);
    const T* g = grad.row(b, t);
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) {
      const T s = T(1) / (T(1) + std::exp(-d[c]));
      d[c] = g[c] * s * (T(1) + d[c] * (T(1) - s));
    }
  }

  // dx[t] = sum_k taps[k] * dpre[t + (K - 1) - k].
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t b = r / seq, t = r % seq;
    T* d = out.row(b, t);
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c)
      d[c] = T(0);
    for (std::int64_t k = 0; k < kernel; ++k) {
      const std::int64_t target = t + (kernel - 1) - k;
      if (target >= seq) continue;
      const T* w = taps.data() + k * channels;
      const T* src = dpre.data() + (b * seq + target) * channels;
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c)
        d[c] += w[c] * src[c];
    }
  }

  // dweight[:, k] and dbias: column sums over rows in fixed chunks.
  ChunkedColumnSums<T> sums(rows, channels, static_cast<int>(kernel) + 1);
  for_each_chunk(sums, rows, channels, [&](std::int64_t chunk) {
    for (std::int64_t r = sums.first_row(chunk); r < sums.end_row(chunk, rows); ++r) {
      const std::int64_t b = r / seq, t = r % seq;
      const T* d = dpre.data() + r * channels;
      T* part_bias = sums.partial(chunk, static_cast<int>(kernel));
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c)
        part_bias[c] += d[c];
      for (std::int64_t k = 0; k < kernel; ++k) {
        const std::int64_t source = t - (kernel - 1) + k;
        if (source < 0) continue;
        const T* xr = in.row(b, source);
        T* part = sums.partial(chunk, static_cast<int>(k));
#pragma omp simd
        for (std::int64_t c = 0; c < channels; ++c)
          part[c] += d[c] * xr[c];
      }
    }
  });
  sums.reduce(static_cast<int>(kernel), dbias.data<T>(), accumulate);
  std::vector<T> column(static_cast<std::size_t>(channels));
  T* dw = dweight.data<T>();
  for (std::int64_t k = 0; k < kernel; ++k) {
    sums.reduce(static_cast<int>(k), column.data(), false);
    for (std::int64_t c = 0; c < channels; ++c) {
      T& target = dw[c * kernel + k];
      target = accumulate ? target + column[static_cast<std::size_t>(c)]
                          : column[static_cast<std::size_t>(c)];
    }
  }
}

}  // namespace

void CpuBackend::causal_conv1d_silu_forward(const Tensor& x, const Tensor& weight,
                                            const Tensor& bias, Tensor& y) {
  constexpr const char* op = "causal_conv1d_silu_forward";
  ops::check_causal_conv1d_args(op, x, weight, bias, {{"y", &y}}, device());
  dispatch_float(op, x.dtype(), [&]<typename T>() { conv_forward<T>(x, weight, bias, y); });
}

void CpuBackend::causal_conv1d_silu_backward(const Tensor& dy, const Tensor& x,
                                             const Tensor& weight, const Tensor& bias, Tensor& dx,
                                             Tensor& dweight, Tensor& dbias,
                                             bool accumulate_params) {
  constexpr const char* op = "causal_conv1d_silu_backward";
  ops::check_causal_conv1d_args(op, x, weight, bias, {{"dy", &dy}, {"dx", &dx}}, device());
  ops::check_param_grad(op, "dweight", dweight, "weight", weight, x, device());
  ops::check_param_grad(op, "dbias", dbias, "bias", bias, x, device());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    conv_backward<T>(dy, x, weight, bias, dx, dweight, dbias, accumulate_params);
  });
}

}  // namespace megatron::cpu
