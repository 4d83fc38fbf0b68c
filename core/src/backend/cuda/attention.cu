// CUDA fused attention (FlashAttention-2 style, forward and backward), following the CPU
// backend's algorithm (cpu/attention_tiles.h) step for step: online softmax over key tiles,
// lse = max + log(sum) saved, rows that see no key give zero output and lse = -inf; backward
// recomputes P = exp(scale * q.k - lse) and uses rowsum(dout * out). Causal masking is bottom-right
// aligned, padding keys (AttentionParams::key_padding_mask) and keys before a query's first key
// (AttentionParams::first_key) are excluded like causally hidden ones, tiles of nothing but padding
// are skipped, heads are grouped (GQA), dropout uses
// AttentionParams' Philox indexing.
//
// Why hand-written rather than cuDNN's fused attention: cuDNN's SDPA takes only fp16/bf16 (this op
// is f32/f64), draws its dropout mask from its own RNG (not the documented Philox stream, so
// results would differ from the CPU), and its C++ frontend is not available in this toolchain.
//
// Layout: one warp per query row (forward, dq) or key row (dk/dv), eight rows per block sharing
// shared-memory tiles of 32 (f32) or 16 (f64) keys or queries. A lane computes one whole dot
// product from shared memory (rows padded by one element against bank conflicts); each lane owns
// features lane, lane + 32, ... of the accumulators, so the head dimension is at most 256. dq and
// dk/dv are computed by separate kernels, each output written by one warp: no atomics, the same
// bits on every run.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/elementwise_math.h"
#include "backend/op_argument_checks.h"

namespace megatron::cuda {

namespace {

constexpr int kWarps = 8;      // rows per block
constexpr int kMaxChunks = 8;  // features per lane: head_dim <= 32 * kMaxChunks
constexpr int kMaxHeadDim = 32 * kMaxChunks;

// Keys (or queries) per shared-memory tile.
template <typename T>
inline constexpr int kTileRows = sizeof(T) == 8 ? 16 : 32;

// A logical (B, S, H, D) tensor with element strides for B, S and H; D is contiguous.
template <typename T>
struct Bshd {
  T* data;
  std::int64_t batch_stride, seq_stride, head_stride;
  __device__ T* row(std::int64_t b, std::int64_t s, std::int64_t h) const {
    return data + b * batch_stride + s * seq_stride + h * head_stride;
  }
};

// A logical (B, H, S) tensor (lse).
template <typename T>
struct Bhs {
  T* data;
  std::int64_t batch_stride, head_stride, seq_stride;
  __device__ T& at(std::int64_t b, std::int64_t h, std::int64_t s) const {
    return data[b * batch_stride + h * head_stride + s * seq_stride];
  }
};

struct Problem {
  std::int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  bool causal;
  float dropout_p;
  std::uint64_t seed, offset;
  const std::uint8_t* key_padding;  // (B, Sk), non-zero = excluded key; null when none
  const std::int32_t* first_key;    // (B, Sq), first key each query sees; null: key 0

  // Whether key j of sample b is padding.
  __device__ bool padded(std::int64_t b, std::int64_t j) const {
    return key_padding != nullptr && key_padding[b * seq_k + j] != 0;
  }

  // Whether query i of sample b sees key j as far as first_key goes.
  __device__ bool after_first(std::int64_t b, std::int64_t i, std::int64_t j) const {
    return first_key == nullptr || j >= first_key[b * seq_q + i];
  }

  __device__ std::int64_t group() const { return heads_q / heads_kv; }
  // Bottom-right causal alignment: query i sees keys j <= i + key_shift().
  __device__ std::int64_t key_shift() const { return seq_k - seq_q; }
  // Keys [0, end) that query i sees.
  __device__ std::int64_t visible_end(std::int64_t i) const {
    if (!causal) return seq_k;
    const std::int64_t end = i + key_shift() + 1;
    return end < 0 ? 0 : (end > seq_k ? seq_k : end);
  }
  // The dropout multiplier (0 or keep_scale) of element (b, h, i, j).
  template <typename T>
  __device__ T dropout(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j,
                       T keep_scale) const {
    const auto index = static_cast<std::uint64_t>(((b * heads_q + h) * seq_q + i) * seq_k + j);
    return math::dropout_keeps(seed, offset, index, dropout_p) ? keep_scale : T(0);
  }
};

template <typename T>
__device__ __forceinline__ T dot(const T* a, const T* b, int n) {
  T sum = T(0);
  for (int d = 0; d < n; ++d)
    sum += a[d] * b[d];
  return sum;
}

template <typename T>
__device__ __forceinline__ T* shared_as() {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  return reinterpret_cast<T*>(shared_raw);
}

// The additive score bias of (h, i, j) (AttentionParams::bias, (Hq, Sq, Sk)), 0 without one.
template <typename T>
__device__ __forceinline__ T bias_at(const T* bias, const Problem& p, std::int64_t h,
                                     std::int64_t i, std::int64_t j) {
  return bias ? bias[(h * p.seq_q + i) * p.seq_k + j] : T(0);
}

// ---- forward ----------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    forward_kernel(Problem p, T scale, Bshd<const T> q, Bshd<const T> k, Bshd<const T> v,
                   Bshd<T> out, Bhs<T> lse, const T* bias) {
  constexpr int kTile = kTileRows<T>;
  const int dim = static_cast<int>(p.head_dim), ld = dim + 1;
  T* q_s = shared_as<T>();      // [kWarps][dim]
  T* k_s = q_s + kWarps * dim;  // [kTile][dim + 1]
  T* v_s = k_s + kTile * ld;    // [kTile][dim + 1]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, h = blockIdx.y, q0 = std::int64_t(blockIdx.x) * kWarps;
  const std::int64_t hk = h / p.group();
  const std::int64_t i = q0 + warp;
  const bool active = i < p.seq_q;
  const std::int64_t last_row = min(p.seq_q, q0 + kWarps) - 1;
  const std::int64_t key_end = p.visible_end(last_row);  // keys any row of the block sees
  const std::int64_t visible = active ? p.visible_end(i) : 0;
  const T keep_scale = math::dropout_scale<T>(p.dropout_p);

  for (int e = threadIdx.x; e < kWarps * dim; e += blockDim.x) {
    const std::int64_t row = q0 + e / dim;
    q_s[e] = row < p.seq_q ? q.row(b, row, h)[e % dim] : T(0);
  }
  T acc[kMaxChunks];
  for (int c = 0; c < kMaxChunks; ++c)
    acc[c] = T(0);
  T running_max = negative_infinity<T>(), running_sum = T(0);

  for (std::int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    const std::int64_t cols = min(std::int64_t(kTile), key_end - k0);
    // The previous tile is consumed; a tile of nothing but padding adds nothing to any row.
    if (!__syncthreads_or(threadIdx.x < cols && !p.padded(b, k0 + threadIdx.x))) continue;
    for (int e = threadIdx.x; e < kTile * dim; e += blockDim.x) {
      const int t = e / dim, d = e % dim;
      k_s[t * ld + d] = t < cols ? k.row(b, k0 + t, hk)[d] : T(0);
      v_s[t * ld + d] = t < cols ? v.row(b, k0 + t, hk)[d] : T(0);
    }
    __syncthreads();
    if (!active) continue;
    const std::int64_t j = k0 + lane;
    const bool sees = lane < kTile && j < visible && !p.padded(b, j) && p.after_first(b, i, j);
    const T s =
        sees ? dot(q_s + warp * dim, k_s + lane * ld, dim) * scale + bias_at(bias, p, h, i, j)
             : negative_infinity<T>();
    const T tile_max = warp_max(s);
    const T new_max = tile_max > running_max ? tile_max : running_max;
    if (new_max == negative_infinity<T>()) continue;  // nothing visible to this row yet
    const T rescale = math::exp_fast(running_max - new_max);
    const T prob = math::exp_fast(s - new_max);  // 0 where masked
    running_sum = running_sum * rescale + warp_sum(prob);
    running_max = new_max;
    const T dropped = (sees && p.dropout_p > 0) ? prob * p.dropout(b, h, i, j, keep_scale) : prob;
    for (int c = 0; c < kMaxChunks; ++c)
      acc[c] *= rescale;
    for (int t = 0; t < kTile; ++t) {
      const T pt = __shfl_sync(0xffffffffu, dropped, t);
      for (int c = 0; c < kMaxChunks; ++c) {
        const int d = lane + 32 * c;
        if (d < dim) acc[c] += pt * v_s[t * ld + d];
      }
    }
  }
  if (!active) return;
  T* o = out.row(b, i, h);
  const bool any = running_sum > T(0);
  const T inv = any ? T(1) / running_sum : T(0);
  for (int c = 0; c < kMaxChunks; ++c) {
    const int d = lane + 32 * c;
    if (d < dim) o[d] = any ? acc[c] * inv : T(0);  // no visible key: zero, as a masked row
  }
  if (lane == 0)
    lse.at(b, h, i) = any ? running_max + std::log(running_sum) : negative_infinity<T>();
}

// ---- backward ---------------------------------------------------------------------------------

// lse as backward uses it: +inf for rows that see no key, so exp(score - lse) is 0 there.
template <typename T>
__device__ __forceinline__ T lse_for_backward(T lse) {
  return lse == negative_infinity<T>() ? -negative_infinity<T>() : lse;
}

// rowsum(dout * out) per (b, h, i) row, in feature order (as the CPU).
template <typename T>
__global__ void row_dot_kernel(Problem p, Bshd<const T> dout, Bshd<const T> out, T* dots) {
  const std::int64_t rows = p.batch * p.heads_q * p.seq_q;
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = r % p.seq_q, bh = r / p.seq_q;
    const std::int64_t b = bh / p.heads_q, h = bh % p.heads_q;
    dots[r] = dot(dout.row(b, i, h), out.row(b, i, h), static_cast<int>(p.head_dim));
  }
}

// dbias (Hq, Sq, Sk) = the per-sample shares (B, Hq, Sq, Sk) summed over samples in order.
template <typename T>
__global__ void bias_grad_kernel(std::int64_t batch, std::int64_t per_sample, const T* shares,
                                 T* dbias) {
  for (std::int64_t e = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; e < per_sample;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    T sum = T(0);
    for (std::int64_t b = 0; b < batch; ++b)
      sum += shares[b * per_sample + e];
    dbias[e] = sum;
  }
}

// dq for one query row per warp: dq = sum_j dS_ij k_j, dS = P (dP * mask - rowdot) scale.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    dq_kernel(Problem p, T scale, Bshd<const T> q, Bshd<const T> k, Bshd<const T> v,
              Bshd<const T> dout, Bhs<const T> lse, const T* row_dots, Bshd<T> dq, const T* bias,
              T* bias_grads) {
  constexpr int kTile = kTileRows<T>;
  const int dim = static_cast<int>(p.head_dim), ld = dim + 1;
  T* q_s = shared_as<T>();       // [kWarps][dim]
  T* do_s = q_s + kWarps * dim;  // [kWarps][dim]
  T* k_s = do_s + kWarps * dim;  // [kTile][dim + 1]
  T* v_s = k_s + kTile * ld;     // [kTile][dim + 1]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, h = blockIdx.y, q0 = std::int64_t(blockIdx.x) * kWarps;
  const std::int64_t hk = h / p.group();
  const std::int64_t i = q0 + warp;
  const bool active = i < p.seq_q;
  const std::int64_t key_end = p.visible_end(min(p.seq_q, q0 + kWarps) - 1);
  const std::int64_t visible = active ? p.visible_end(i) : 0;
  const T keep_scale = math::dropout_scale<T>(p.dropout_p);
  const T row_lse = active ? lse_for_backward(lse.at(b, h, i)) : T(0);
  const T row_dot = active ? row_dots[(b * p.heads_q + h) * p.seq_q + i] : T(0);

  for (int e = threadIdx.x; e < kWarps * dim; e += blockDim.x) {
    const std::int64_t row = q0 + e / dim;
    const bool in = row < p.seq_q;
    q_s[e] = in ? q.row(b, row, h)[e % dim] : T(0);
    do_s[e] = in ? dout.row(b, row, h)[e % dim] : T(0);
  }
  T acc[kMaxChunks];
  for (int c = 0; c < kMaxChunks; ++c)
    acc[c] = T(0);

  for (std::int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    const std::int64_t cols = min(std::int64_t(kTile), key_end - k0);
    // The previous tile is consumed; a tile of nothing but padding has P = 0 everywhere.
    if (!__syncthreads_or(threadIdx.x < cols && !p.padded(b, k0 + threadIdx.x))) continue;
    for (int e = threadIdx.x; e < kTile * dim; e += blockDim.x) {
      const int t = e / dim, d = e % dim;
      k_s[t * ld + d] = t < cols ? k.row(b, k0 + t, hk)[d] : T(0);
      v_s[t * ld + d] = t < cols ? v.row(b, k0 + t, hk)[d] : T(0);
    }
    __syncthreads();
    if (!active) continue;
    const std::int64_t j = k0 + lane;
    T ds = T(0);
    if (lane < kTile && j < visible && !p.padded(b, j) && p.after_first(b, i, j)) {
      const T prob = math::exp_fast(dot(q_s + warp * dim, k_s + lane * ld, dim) * scale +
                                    bias_at(bias, p, h, i, j) - row_lse);
      T dprob = dot(do_s + warp * dim, v_s + lane * ld, dim);
      if (p.dropout_p > 0) dprob *= p.dropout(b, h, i, j, keep_scale);
      const T unscaled = prob * (dprob - row_dot);
      // This sample's share of the bias gradient; summed over samples by bias_grad_kernel.
      if (bias_grads) bias_grads[((b * p.heads_q + h) * p.seq_q + i) * p.seq_k + j] = unscaled;
      ds = unscaled * scale;
    }
    for (int t = 0; t < kTile; ++t) {
      const T dst = __shfl_sync(0xffffffffu, ds, t);
      for (int c = 0; c < kMaxChunks; ++c) {
        const int d = lane + 32 * c;
        if (d < dim) acc[c] += dst * k_s[t * ld + d];
      }
    }
  }
  if (!active) return;
  T* o = dq.row(b, i, h);
  for (int c = 0; c < kMaxChunks; ++c) {
    const int d = lane + 32 * c;
    if (d < dim) o[d] = acc[c];
  }
}

// dk and dv for one key row per warp of kv head hk, summed over the group's query heads in order:
// dv = sum_i P_ij mask_ij dout_i, dk = sum_i dS_ij q_i.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    dkdv_kernel(Problem p, T scale, Bshd<const T> q, Bshd<const T> k, Bshd<const T> v,
                Bshd<const T> dout, Bhs<const T> lse, const T* row_dots, Bshd<T> dk, Bshd<T> dv,
                const T* bias) {
  constexpr int kTile = kTileRows<T>;
  const int dim = static_cast<int>(p.head_dim), ld = dim + 1;
  T* k_s = shared_as<T>();       // [kWarps][dim]: this block's keys
  T* v_s = k_s + kWarps * dim;   // [kWarps][dim]
  T* q_s = v_s + kWarps * dim;   // [kTile][dim + 1]: a tile of queries
  T* do_s = q_s + kTile * ld;    // [kTile][dim + 1]
  T* lse_s = do_s + kTile * ld;  // [kTile]
  T* dot_s = lse_s + kTile;      // [kTile]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, hk = blockIdx.y, k0 = std::int64_t(blockIdx.x) * kWarps;
  const std::int64_t j = k0 + warp;
  const bool active = j < p.seq_k;
  const bool seen = active && !p.padded(b, j);  // padding keys get zero gradients
  const T keep_scale = math::dropout_scale<T>(p.dropout_p);
  // The first query that sees key k0; earlier ones see none of this block's keys.
  const std::int64_t q_begin = p.causal ? max(std::int64_t(0), k0 - p.key_shift()) : 0;

  for (int e = threadIdx.x; e < kWarps * dim; e += blockDim.x) {
    const std::int64_t row = k0 + e / dim;
    const bool in = row < p.seq_k;
    k_s[e] = in ? k.row(b, row, hk)[e % dim] : T(0);
    v_s[e] = in ? v.row(b, row, hk)[e % dim] : T(0);
  }
  T dk_acc[kMaxChunks], dv_acc[kMaxChunks];
  for (int c = 0; c < kMaxChunks; ++c)
    dk_acc[c] = T(0), dv_acc[c] = T(0);

  // A block of padding keys only writes its zeros.
  const std::int64_t groups = __syncthreads_or(seen) ? p.group() : 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t h = hk * p.group() + g;
    for (std::int64_t i0 = q_begin; i0 < p.seq_q; i0 += kTile) {
      __syncthreads();
      const std::int64_t rows = min(std::int64_t(kTile), p.seq_q - i0);
      for (int e = threadIdx.x; e < kTile * dim; e += blockDim.x) {
        const int t = e / dim, d = e % dim;
        q_s[t * ld + d] = t < rows ? q.row(b, i0 + t, h)[d] : T(0);
        do_s[t * ld + d] = t < rows ? dout.row(b, i0 + t, h)[d] : T(0);
      }
      for (int t = threadIdx.x; t < kTile; t += blockDim.x) {
        lse_s[t] = t < rows ? lse_for_backward(lse.at(b, h, i0 + t)) : T(0);
        dot_s[t] = t < rows ? row_dots[(b * p.heads_q + h) * p.seq_q + i0 + t] : T(0);
      }
      __syncthreads();
      if (!seen) continue;
      const std::int64_t i = i0 + lane;
      T dropped = T(0), ds = T(0);
      if (lane < kTile && lane < rows && j < p.visible_end(i) && p.after_first(b, i, j)) {
        const T prob = math::exp_fast(dot(k_s + warp * dim, q_s + lane * ld, dim) * scale +
                                      bias_at(bias, p, h, i, j) - lse_s[lane]);
        T dprob = dot(v_s + warp * dim, do_s + lane * ld, dim);
        const T mask = p.dropout_p > 0 ? p.dropout(b, h, i, j, keep_scale) : T(1);
        dprob *= mask;
        dropped = prob * mask;
        ds = prob * (dprob - dot_s[lane]) * scale;
      }
      for (int t = 0; t < kTile; ++t) {
        const T pt = __shfl_sync(0xffffffffu, dropped, t);
        const T dst = __shfl_sync(0xffffffffu, ds, t);
        for (int c = 0; c < kMaxChunks; ++c) {
          const int d = lane + 32 * c;
          if (d < dim) {
            dv_acc[c] += pt * do_s[t * ld + d];
            dk_acc[c] += dst * q_s[t * ld + d];
          }
        }
      }
    }
  }
  if (!active) return;
  T* ok = dk.row(b, j, hk);
  T* ov = dv.row(b, j, hk);
  for (int c = 0; c < kMaxChunks; ++c) {
    const int d = lane + 32 * c;
    if (d < dim) ok[d] = dk_acc[c], ov[d] = dv_acc[c];
  }
}

// ---- host side --------------------------------------------------------------------------------

template <typename T>
Bshd<T> bshd(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2)};
}
template <typename T>
Bhs<T> bhs(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2)};
}

void check_bshd(const char* op, const char* name, const Tensor& t, const Tensor& q, Device device) {
  ops::check_attention_bshd(op, name, t, q, device);
}

Problem check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                     const AttentionParams& params, Device device) {
  const ops::AttentionShapes s = ops::check_attention_args(op, q, k, v, params, device);
  const Tensor& padding = params.key_padding_mask;  // checked: (B, Sk) u8, contiguous
  const auto* key_padding = padding.defined() && padding.numel() > 0
                                ? static_cast<const std::uint8_t*>(padding.raw_data())
                                : nullptr;
  const Tensor& first = params.first_key;  // checked: (B, Sq) i32, contiguous
  const auto* first_key = first.defined() && first.numel() > 0
                              ? static_cast<const std::int32_t*>(first.raw_data())
                              : nullptr;
  const Problem p{s.batch,     s.seq_q,       s.seq_k,       s.heads_q,
                  s.heads_kv,  s.head_dim,    params.causal, params.dropout_p,
                  params.seed, params.offset, key_padding,   first_key};
  if (p.head_dim > kMaxHeadDim) {
    ops::fail(op, "the CUDA attention kernel handles head dimensions up to " +
                      std::to_string(kMaxHeadDim) + ", got " + q.describe());
  }
  if (p.batch > 65535 || p.heads_q > 65535) {
    ops::fail(op, "batch and head counts must be at most 65535 on CUDA, got " + q.describe());
  }
  return p;
}

void check_lse(const char* op, const Tensor& lse, const Tensor& q, const Problem& p,
               Device device) {
  ops::check_device(op, "lse", lse, device);
  ops::check_shape(op, "lse", lse, {p.batch, p.heads_q, p.seq_q});
  ops::check_same_dtype(op, "lse", lse, "q", q);
}

// Launches `kernel` with `bytes` of dynamic shared memory, opting in above the 48 KiB default.
template <typename Kernel, typename... Args>
void launch(const char* op, Kernel kernel, dim3 grid, std::size_t bytes, cudaStream_t stream,
            Args... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  if (bytes > 48 * 1024) {
    MEGATRON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
  }
  kernel<<<grid, kWarps * 32, bytes, stream>>>(args...);
  check_launch(op);
}

// AttentionParams::bias as the kernels read it (checked: (Hq, Sq, Sk) of q's dtype), or null.
template <typename T>
const T* score_bias(const AttentionParams& params) {
  return params.bias.defined() && params.bias.numel() > 0
             ? static_cast<const T*>(params.bias.raw_data())
             : nullptr;
}

unsigned blocks_of(std::int64_t n) {
  return static_cast<unsigned>((n + kWarps - 1) / kWarps);
}

// attention_merge: one thread per (b, h, s) row.
template <typename T>
__global__ void merge_kernel(std::int64_t batch, std::int64_t heads, std::int64_t seq,
                             std::int64_t dim, Bshd<T> out, Bhs<T> lse, Bshd<const T> part_out,
                             Bhs<const T> part_lse) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * heads * seq) return;
  const std::int64_t s = i % seq, h = i / seq % heads, b = i / seq / heads;
  T& lse_row = lse.at(b, h, s);
  const T part = part_lse.at(b, h, s);
  const T kMinusInf = negative_infinity<T>();
  if (part == kMinusInf) return;
  const T merged =
      lse_row == kMinusInf ? part : fmax(lse_row, part) + log1p(exp(-fabs(lse_row - part)));
  const T keep = exp(lse_row - merged), take = exp(part - merged);
  T* row = out.row(b, s, h);
  const T* part_row = part_out.row(b, s, h);
  for (std::int64_t d = 0; d < dim; ++d)
    row[d] = row[d] * keep + part_row[d] * take;
  lse_row = merged;
}

}  // namespace

void CudaBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionParams& params, Tensor& out, Tensor& lse) {
  constexpr const char* op = "attention_forward";
  const Device here = device();
  const Problem p = check_inputs(op, q, k, v, params, here);
  check_bshd(op, "out", out, q, here);
  ops::check_same_shape(op, "out", out, "q", q);
  check_lse(op, lse, q, p, here);
  if (out.numel() == 0 && lse.numel() == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, q.dtype(), [&]<typename T>() {
    const std::size_t bytes =
        sizeof(T) *
        static_cast<std::size_t>(kWarps * p.head_dim + 2 * kTileRows<T> * (p.head_dim + 1));
    const dim3 grid(blocks_of(p.seq_q), static_cast<unsigned>(p.heads_q),
                    static_cast<unsigned>(p.batch));
    launch(op, forward_kernel<T>, grid, bytes, stream_, p, static_cast<T>(params.scale),
           bshd<const T>(q), bshd<const T>(k), bshd<const T>(v), bshd<T>(out), bhs<T>(lse),
           score_bias<T>(params));
  });
}

void CudaBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                     const AttentionParams& params, Tensor& dq, Tensor& dk,
                                     Tensor& dv, Tensor* dbias) {
  constexpr const char* op = "attention_backward";
  const Device here = device();
  const Problem p = check_inputs(op, q, k, v, params, here);
  check_bshd(op, "dout", dout, q, here);
  ops::check_same_shape(op, "dout", dout, "q", q);
  check_bshd(op, "out", out, q, here);
  ops::check_same_shape(op, "out", out, "q", q);
  check_lse(op, lse, q, p, here);
  check_bshd(op, "dq", dq, q, here);
  ops::check_same_shape(op, "dq", dq, "q", q);
  check_bshd(op, "dk", dk, q, here);
  ops::check_same_shape(op, "dk", dk, "k", k);
  check_bshd(op, "dv", dv, q, here);
  ops::check_same_shape(op, "dv", dv, "v", v);
  ops::check_bias_grad(op, dbias, params, q,
                       {p.batch, p.seq_q, p.seq_k, p.heads_q, p.heads_kv, p.head_dim}, here);
  if (dbias && dq.numel() == 0) fill(*dbias, 0.0);
  if (dq.numel() == 0 && dk.numel() == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, q.dtype(), [&]<typename T>() {
    const T scale = static_cast<T>(params.scale);
    const std::int64_t rows = p.batch * p.heads_q * p.seq_q;
    Tensor dots = Tensor::empty({std::max<std::int64_t>(rows, 1)}, q.dtype(), here);
    T* row_dots = static_cast<T*>(dots.raw_data());
    if (rows > 0) {
      row_dot_kernel<T><<<grid_for(rows), kThreads, 0, stream_>>>(p, bshd<const T>(dout),
                                                                  bshd<const T>(out), row_dots);
      check_launch(op);
    }
    const std::size_t tile = static_cast<std::size_t>(kTileRows<T>);
    const std::size_t dim = static_cast<std::size_t>(p.head_dim);
    const std::size_t dq_bytes = sizeof(T) * (2 * kWarps * dim + 2 * tile * (dim + 1));
    // The bias gradient's per-sample shares (B, Hq, Sq, Sk), zero where a key is not seen.
    const std::int64_t per_sample = p.heads_q * p.seq_q * p.seq_k;
    Tensor shares;
    T* bias_grads = nullptr;
    if (dbias && dbias->numel() > 0) {
      shares = Tensor::empty({p.batch, p.heads_q, p.seq_q, p.seq_k}, q.dtype(), here);
      bias_grads = static_cast<T*>(shares.raw_data());
      check_cuda(
          cudaMemsetAsync(bias_grads, 0, sizeof(T) * static_cast<std::size_t>(p.batch * per_sample),
                          stream_),
          op);
    }
    launch(
        op, dq_kernel<T>,
        dim3(blocks_of(p.seq_q), static_cast<unsigned>(p.heads_q), static_cast<unsigned>(p.batch)),
        dq_bytes, stream_, p, scale, bshd<const T>(q), bshd<const T>(k), bshd<const T>(v),
        bshd<const T>(dout), bhs<const T>(lse), static_cast<const T*>(row_dots), bshd<T>(dq),
        score_bias<T>(params), bias_grads);
    if (bias_grads) {
      bias_grad_kernel<T><<<grid_for(per_sample), kThreads, 0, stream_>>>(
          p.batch, per_sample, static_cast<const T*>(bias_grads),
          static_cast<T*>(dbias->raw_data()));
      check_launch(op);
    }
    const std::size_t dkdv_bytes = sizeof(T) * (2 * kWarps * dim + 2 * tile * (dim + 1) + 2 * tile);
    launch(
        op, dkdv_kernel<T>,
        dim3(blocks_of(p.seq_k), static_cast<unsigned>(p.heads_kv), static_cast<unsigned>(p.batch)),
        dkdv_bytes, stream_, p, scale, bshd<const T>(q), bshd<const T>(k), bshd<const T>(v),
        bshd<const T>(dout), bhs<const T>(lse), static_cast<const T*>(row_dots), bshd<T>(dk),
        bshd<T>(dv), score_bias<T>(params));
  });
}

void CudaBackend::attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out,
                                  const Tensor& part_lse) {
  constexpr const char* op = "attention_merge";
  ops::check_attention_merge(op, out, lse, part_out, part_lse, device());
  const std::int64_t b = out.size(0), s = out.size(1), h = out.size(2), d = out.size(3);
  if (b * s * h == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, out.dtype(), [&]<typename T>() {
    merge_kernel<T><<<grid_for(b * h * s), kThreads, 0, stream_>>>(
        b, h, s, d, bshd<T>(out), bhs<T>(lse), bshd<const T>(part_out), bhs<const T>(part_lse));
    check_launch(op);
  });
}

}  // namespace megatron::cuda
