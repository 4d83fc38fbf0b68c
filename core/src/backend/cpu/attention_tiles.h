// Fused-attention tile kernels (FlashAttention-2 forward and backward), written once and compiled
// once per instruction set. Each attention_<isa>.cpp includes this file after its
// `#pragma GCC target` and after defining, in megatron::cpu::attention::{anonymous}:
//   template <class T> struct VecOf;  with typedefs `type` (vector of T), `unaligned` (the same
//                                     with alignof(T)) and, for float, `bits` (int32 lanes)
//   fmadd(a, b, c) on float and double vectors (a * b + c)
//   constexpr int kTileRows, kTileVectors (the micro-kernel's register tile)
// Everything here has internal linkage, so the per-ISA copies never meet at link time. The .cpp
// includes <cmath>, <cstdint>, <utility>, attention_kernels.h and philox.h BEFORE its target
// pragma, so that no inline function with external linkage is emitted with instructions the CPU
// may lack.
#pragma once

namespace megatron::cpu::attention {
namespace {

template <class T>
using Vec = typename VecOf<T>::type;
template <class T>
inline constexpr std::int64_t kLanes = static_cast<std::int64_t>(sizeof(Vec<T>) / sizeof(T));

template <class T>
inline Vec<T> load(const T* p) {
  return *reinterpret_cast<const typename VecOf<T>::unaligned*>(p);
}
template <class T>
inline void store(T* p, Vec<T> v) {
  *reinterpret_cast<typename VecOf<T>::unaligned*>(p) = v;
}
// (Not `Vec<T>{} + x`: adding 0 is no identity for -0, so that costs a scalar add per splat.)
template <class T>
inline Vec<T> splat(T x) {
  Vec<T> v{};
  for (std::int64_t i = 0; i < kLanes<T>; ++i)
    v[i] = x;
  return v;
}
template <class T>
inline Vec<T> vmax(Vec<T> a, Vec<T> b) {
  return a > b ? a : b;
}
// Lanes rotated down by kShift.
template <std::size_t kShift, class T, std::size_t... I>
inline Vec<T> rotate_lanes(Vec<T> v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, ((I + kShift) % sizeof...(I))...);
}

// The sum (or max) of all lanes as a fixed tree of log2(lanes) shuffles.
template <class T, bool kMax, std::size_t kShift = static_cast<std::size_t>(kLanes<T>) / 2>
inline T reduce_lanes(Vec<T> v) {
  if constexpr (kShift == 0) {
    return v[0];
  } else {
    const Vec<T> r = rotate_lanes<kShift, T>(v, std::make_index_sequence<kLanes<T>>{});
    return reduce_lanes<T, kMax, kShift / 2>(kMax ? vmax<T>(v, r) : v + r);
  }
}
template <class T>
inline T hsum(Vec<T> v) {
  return reduce_lanes<T, false>(v);
}
template <class T>
inline T hmax(Vec<T> v) {
  return reduce_lanes<T, true>(v);
}

inline std::int64_t min_of(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}
inline std::int64_t max_of(std::int64_t a, std::int64_t b) {
  return a > b ? a : b;
}
inline std::int64_t clamp_to(std::int64_t x, std::int64_t lo, std::int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
inline std::int64_t round_up(std::int64_t n, std::int64_t m) {
  return (n + m - 1) / m * m;
}

template <class T>
inline constexpr T kInf = __builtin_huge_val();

// exp on every lane. float: Cephes' polynomial (about 1 ulp on the range softmax uses), with
// inputs below -87.3 (including -inf, the masked scores) giving exactly 0. double: the C library,
// since f64 exists for gradient checks, not speed.
[[gnu::always_inline]] inline Vec<float> vexp(Vec<float> x) {
  using Bits = typename VecOf<float>::bits;
  const Vec<float> magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  Vec<float> xc = x < splat(-87.3f) ? splat(-87.3f) : x;
  xc = xc > splat(88.0f) ? splat(88.0f) : xc;
  const Vec<float> t = fmadd(xc, splat(1.44269504088896341f), magic);
  const Vec<float> n = t - magic;
  Vec<float> r = fmadd(n, splat(-0.693359375f), xc);
  r = fmadd(n, splat(2.12194440e-4f), r);
  Vec<float> poly = splat(1.9875691500e-4f);
  poly = fmadd(poly, r, splat(1.3981999507e-3f));
  poly = fmadd(poly, r, splat(8.3334519073e-3f));
  poly = fmadd(poly, r, splat(4.1665795894e-2f));
  poly = fmadd(poly, r, splat(1.6666665459e-1f));
  poly = fmadd(poly, r, splat(5.0000001201e-1f));
  const Vec<float> y = fmadd(poly * r, r, r + splat(1.0f));
  const Bits exponent = (__builtin_bit_cast(Bits, t) - __builtin_bit_cast(Bits, magic) + 127) << 23;
  const Vec<float> result = y * __builtin_bit_cast(Vec<float>, exponent);
  return x < splat(-87.3f) ? Vec<float>{} : result;
}
[[gnu::always_inline]] inline Vec<double> vexp(Vec<double> x) {
  for (std::int64_t i = 0; i < kLanes<double>; ++i)
    x[i] = std::exp(x[i]);
  return x;
}

// ---- tile products ----------------------------------------------------------------------------

// C (MR x NV vectors) (+)= A (MR x K, row stride lda) * B (K x NV vectors, row stride ldb), the
// accumulators held in registers for the whole K loop. With kTransA, A is stored transposed
// (K x MR, row stride lda): A's elements are broadcast one at a time, so either layout is free.
template <class T, int MR, int NV, bool kAccumulate, bool kTransA>
inline void micro_tile(std::int64_t k_len, const T* a, std::int64_t lda, const T* b,
                       std::int64_t ldb, T* c, std::int64_t ldc) {
  constexpr std::int64_t W = kLanes<T>;
  Vec<T> acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[r][v] = kAccumulate ? load(c + r * ldc + v * W) : Vec<T>{};
  }
  for (std::int64_t kk = 0; kk < k_len; ++kk) {
    Vec<T> bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      bv[v] = load(b + kk * ldb + v * W);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const Vec<T> av = splat(kTransA ? a[kk * lda + r] : a[r * lda + kk]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        acc[r][v] = fmadd(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      store(c + r * ldc + v * W, acc[r][v]);
  }
}

// The rows left over after whole kTileRows groups: a tile of exactly `rows` rows.
template <class T, int NV, bool kAccumulate, bool kTransA, int MR = kTileRows - 1>
inline void leftover_rows(int rows, std::int64_t k_len, const T* a, std::int64_t lda, const T* b,
                          std::int64_t ldb, T* c, std::int64_t ldc) {
  if constexpr (MR >= 1) {
    if (rows == MR) {
      micro_tile<T, MR, NV, kAccumulate, kTransA>(k_len, a, lda, b, ldb, c, ldc);
    } else {
      leftover_rows<T, NV, kAccumulate, kTransA, MR - 1>(rows, k_len, a, lda, b, ldb, c, ldc);
    }
  }
}

template <class T, int NV, bool kAccumulate, bool kTransA>
void gemm_panel(std::int64_t m, std::int64_t k_len, const T* a, std::int64_t lda, const T* b,
                std::int64_t ldb, T* c, std::int64_t ldc) {
  const std::int64_t a_row_step = kTransA ? 1 : lda;
  std::int64_t r = 0;
  for (; r + kTileRows <= m; r += kTileRows) {
    micro_tile<T, kTileRows, NV, kAccumulate, kTransA>(k_len, a + r * a_row_step, lda, b, ldb,
                                                       c + r * ldc, ldc);
  }
  if (r < m) {
    leftover_rows<T, NV, kAccumulate, kTransA>(static_cast<int>(m - r), k_len, a + r * a_row_step,
                                               lda, b, ldb, c + r * ldc, ldc);
  }
}

template <class T, bool kAccumulate, bool kTransA, int NV = kTileVectors>
void gemm_panel_of_width(int vectors, std::int64_t m, std::int64_t k_len, const T* a,
                         std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc) {
  if constexpr (NV >= 1) {
    if (vectors == NV) {
      gemm_panel<T, NV, kAccumulate, kTransA>(m, k_len, a, lda, b, ldb, c, ldc);
    } else {
      gemm_panel_of_width<T, kAccumulate, kTransA, NV - 1>(vectors, m, k_len, a, lda, b, ldb, c,
                                                           ldc);
    }
  }
}

// C (m x n) (+)= A (m x k) * B (k x n), all row-major with the given row strides (with kTransA,
// A is stored as its transpose, k x m); n is a multiple of the vector width. Every element of C
// is a sum over k in increasing order, whatever m and n.
template <class T, bool kAccumulate, bool kTransA = false>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k_len, const T* a, std::int64_t lda,
          const T* b, std::int64_t ldb, T* c, std::int64_t ldc) {
  constexpr std::int64_t W = kLanes<T>;
  for (std::int64_t col = 0; col < n; col += kTileVectors * W) {
    const int vectors = static_cast<int>(min_of((n - col) / W, kTileVectors));
    gemm_panel_of_width<T, kAccumulate, kTransA>(vectors, m, k_len, a, lda, b + col, ldb, c + col,
                                                 ldc);
  }
}

// ---- packing ----------------------------------------------------------------------------------

// dst (n x width_pad) = src (n x width, row stride ld), zero past width.
template <class T>
void pack_rows(const T* src, std::int64_t ld, std::int64_t n, std::int64_t width, T* dst,
               std::int64_t width_pad) {
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t d = 0; d < width; ++d)
      dst[j * width_pad + d] = src[j * ld + d];
    for (std::int64_t d = width; d < width_pad; ++d)
      dst[j * width_pad + d] = 0;
  }
}

// A (B, S, H, D) block of `n` rows as a GEMM operand of width round_up(D, lanes): the tensor's
// own rows when D is already a whole number of vectors, else a zero-padded copy in `buffer`.
template <class T>
struct Operand {
  const T* data;
  std::int64_t ld;
};
template <class T>
Operand<T> rows_operand(const T* src, std::int64_t ld, std::int64_t n, std::int64_t width,
                        std::int64_t width_pad, T* buffer) {
  if (width == width_pad) return {src, ld};
  pack_rows(src, ld, n, width, buffer, width_pad);
  return {buffer, width_pad};
}

// ---- scratch ----------------------------------------------------------------------------------

// Hands out consecutive 64-byte-aligned pieces of one per-thread scratch allocation.
template <class T>
class Carver {
 public:
  explicit Carver(T* base) : next_(base) {}
  T* take(std::int64_t n) {
    T* piece = next_;
    next_ += round_up(n, kAlign);
    return piece;
  }
  static constexpr std::int64_t kAlign = 64 / static_cast<std::int64_t>(sizeof(T));

 private:
  T* next_;
};

template <class T>
std::int64_t padded_head_dim(const Problem<T>& p) {
  return round_up(p.head_dim, kLanes<T>);
}

template <class T>
std::size_t scratch_elements(const Problem<T>& p) {
  const std::int64_t align = Carver<T>::kAlign;
  const std::int64_t tile = round_up(kBlockQ * kBlockK, align);
  const std::int64_t rows = round_up(max_of(kBlockQ, kBlockK) * padded_head_dim(p), align);
  const std::int64_t vectors = 5 * round_up(max_of(kBlockQ, kBlockK), align);
  // backward_kv_block needs the most: 5 tiles, 4 row blocks, 3 short vectors; forward_block and
  // backward_q_block take at most 3 tiles, 2 row blocks and 5 short vectors.
  return static_cast<std::size_t>(5 * tile + 4 * rows + vectors + align);
}

// ---- dropout ----------------------------------------------------------------------------------

// The dropout multipliers (0 or 1 / (1 - p)) of consecutive Philox indices base, base + 1, ...,
// drawing one Philox block per four elements.
template <class T>
class DropoutStream {
 public:
  DropoutStream(std::uint64_t seed, float p)
      : seed_(seed), p_(p), keep_scale_(T(1) / (T(1) - T(p))) {}
  T multiplier(std::uint64_t index) {
    const std::uint64_t block = index >> 2;
    if (block != cached_block_ || !cached_) {
      words_ = philox4x32(seed_, block);
      cached_block_ = block;
      cached_ = true;
    }
    return philox_uniform(words_.v[index & 3]) >= p_ ? keep_scale_ : T(0);
  }

 private:
  std::uint64_t seed_;
  float p_;
  T keep_scale_;
  Philox4 words_{};
  std::uint64_t cached_block_ = 0;
  bool cached_ = false;
};

// Philox index of element (b, h, i, j), as AttentionParams documents.
template <class T>
std::uint64_t dropout_index(const Problem<T>& p, std::int64_t b, std::int64_t h, std::int64_t i,
                            std::int64_t j) {
  return p.offset + static_cast<std::uint64_t>(((b * p.heads_q + h) * p.seq_q + i) * p.seq_k + j);
}

// ---- key padding ------------------------------------------------------------------------------

// How many keys of a tile are padding: none, some or all (all: the tile is skipped).
enum class TilePadding { none, some, all };

inline TilePadding tile_padding(const std::uint8_t* padding, std::int64_t cols) {
  if (padding == nullptr) return TilePadding::none;
  std::int64_t padded = 0;
  for (std::int64_t c = 0; c < cols; ++c)
    padded += padding[c] != 0;
  return padded == 0 ? TilePadding::none : (padded == cols ? TilePadding::all : TilePadding::some);
}

// The padding of a tile's `cols` keys as T flags (1 = excluded) in vector-friendly form, 0 up to
// cols_pad (columns past cols are cut off by the callers' `visible` anyway).
template <class T>
const T* padding_flags(const std::uint8_t* padding, std::int64_t cols, std::int64_t cols_pad,
                       T* flags) {
  for (std::int64_t c = 0; c < cols_pad; ++c)
    flags[c] = c < cols && padding[c] != 0 ? T(1) : T(0);
  return flags;
}

// The largest first key of queries [q0, q0 + rows) of sample b.
template <class T>
std::int64_t last_first_key(const Problem<T>& p, std::int64_t b, std::int64_t q0,
                            std::int64_t rows) {
  std::int64_t last = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    last = max_of(last, p.first_key_of(b, q0 + r));
  return last;
}

// ---- forward ----------------------------------------------------------------------------------

// One row of the online softmax: turns the raw scores s[0, width) into probabilities relative to
// the updated running max (0 past `visible` and where `excluded` (padding flags, may be null) is
// set), rescales the running sum and output accumulator. `bias` (may be null; `visible` entries)
// is added to the scaled scores.
template <class T>
void online_softmax_row(T* s, std::int64_t width, std::int64_t visible, const T* excluded,
                        const T* bias, T scale, T& running_max, T& running_sum, T* acc,
                        std::int64_t acc_width) {
  constexpr std::int64_t W = kLanes<T>;
  const std::int64_t whole = visible / W * W;  // vectors entirely visible
  Vec<T> vmx = splat(-kInf<T>);
  if (bias != nullptr) {  // scores + bias, then excluded ones -inf (a select, as below)
    for (std::int64_t c = 0; c < whole; c += W) {
      const Vec<T> x = load(s + c) * scale + load(bias + c);
      const Vec<T> kept = excluded == nullptr              ? x
                          : load(excluded + c) != Vec<T>{} ? splat(-kInf<T>)
                                                           : x;
      store(s + c, kept);
      vmx = vmax<T>(vmx, kept);
    }
  } else if (excluded == nullptr) {
    for (std::int64_t c = 0; c < whole; c += W) {
      const Vec<T> x = load(s + c) * scale;
      store(s + c, x);
      vmx = vmax<T>(vmx, x);
    }
  } else {
    for (std::int64_t c = 0; c < whole; c += W) {
      const Vec<T> x = load(excluded + c) != Vec<T>{} ? splat(-kInf<T>) : load(s + c) * scale;
      store(s + c, x);
      vmx = vmax<T>(vmx, x);
    }
  }
  T block_max = hmax<T>(vmx);
  for (std::int64_t c = whole; c < width; ++c) {
    const bool sees = c < visible && (excluded == nullptr || excluded[c] == T(0));
    s[c] = sees ? (bias != nullptr ? s[c] * scale + bias[c] : s[c] * scale) : -kInf<T>;
    block_max = s[c] > block_max ? s[c] : block_max;
  }
  const T new_max = block_max > running_max ? block_max : running_max;
  if (new_max == -kInf<T>) {  // nothing visible to this row yet
    for (std::int64_t c = 0; c < width; ++c)
      s[c] = 0;
    return;
  }
  const T rescale = std::exp(running_max - new_max);
  Vec<T> sum{};
  for (std::int64_t c = 0; c < width; c += W) {
    const Vec<T> e = vexp(load(s + c) - new_max);
    store(s + c, e);
    sum += e;
  }
  running_sum = running_sum * rescale + hsum<T>(sum);
  running_max = new_max;
  if (rescale != T(1)) {
    for (std::int64_t d = 0; d < acc_width; d += W)
      store(acc + d, load(acc + d) * rescale);
  }
}

template <class T>
void forward_block(const Problem<T>& p, std::int64_t b, std::int64_t h, std::int64_t q0,
                   T* scratch) {
  const std::int64_t dim = p.head_dim, dim_pad = padded_head_dim(p);
  const std::int64_t rows = min_of(kBlockQ, p.seq_q - q0);
  const std::int64_t hk = h / p.group();
  Carver<T> carve(scratch);
  T* s = carve.take(kBlockQ * kBlockK);
  T* acc = carve.take(kBlockQ * dim_pad);
  T* v_pack = carve.take(kBlockK * dim_pad);
  T* running_max = carve.take(kBlockQ);
  T* running_sum = carve.take(kBlockQ);
  T* flags = carve.take(kBlockK);
  for (std::int64_t i = 0; i < rows * dim_pad; ++i)
    acc[i] = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    running_max[r] = -kInf<T>, running_sum[r] = 0;

  const T* q_rows = p.q.row(b, q0, h);
  const std::int64_t key_end = p.visible_key_end(q0 + rows);
  // Tiles before every row's first key add nothing (exactly: their probabilities are all 0).
  const std::int64_t key_begin = p.first_key_of_rows(b, q0, rows) / kBlockK * kBlockK;
  for (std::int64_t k0 = key_begin; k0 < key_end; k0 += kBlockK) {
    const std::int64_t cols = min_of(kBlockK, key_end - k0);
    const std::int64_t cols_pad = round_up(cols, kLanes<T>);
    const std::uint8_t* padding = p.padding_from(b, k0);
    const TilePadding padded = tile_padding(padding, cols);
    if (padded == TilePadding::all) continue;  // adds nothing to any row
    const T* excluded =
        padded == TilePadding::some ? padding_flags(padding, cols, cols_pad, flags) : nullptr;
    const T* k_t = p.k_t.panel(b, hk, k0 / kBlockK);
    gemm<T, false>(rows, cols_pad, dim, q_rows, p.q.seq_stride, k_t, kBlockK, s, cols_pad);
    std::int64_t widest = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t visible =
          p.causal ? clamp_to(q0 + r + p.key_shift() - k0 + 1, 0, cols) : cols;
      widest = max_of(widest, visible);
      T* s_row = s + r * cols_pad;
      // Keys before the row's first key: -inf scores, so probability 0 (as causally hidden ones).
      const std::int64_t hidden = clamp_to(p.first_key_of(b, q0 + r) - k0, 0, cols);
      for (std::int64_t c = 0; c < hidden; ++c)
        s_row[c] = -kInf<T>;
      online_softmax_row(s_row, cols_pad, visible, excluded, p.bias_row(h, q0 + r, k0), p.scale,
                         running_max[r], running_sum[r], acc + r * dim_pad, dim_pad);
      if (p.dropout_p > 0) {
        DropoutStream<T> dropout(p.seed, p.dropout_p);
        const std::uint64_t base = dropout_index(p, b, h, q0 + r, k0);
        for (std::int64_t c = 0; c < visible; ++c)
          s_row[c] *= dropout.multiplier(base + c);
      }
    }
    const Operand<T> v_op =
        rows_operand(p.v.row(b, k0, hk), p.v.seq_stride, widest, dim, dim_pad, v_pack);
    gemm<T, true>(rows, dim_pad, widest, s, cols_pad, v_op.data, v_op.ld, acc, dim_pad);
  }

  for (std::int64_t r = 0; r < rows; ++r) {
    T* out = p.out.row(b, q0 + r, h);
    const T* a = acc + r * dim_pad;
    if (running_sum[r] > 0) {
      const T inv = T(1) / running_sum[r];
      const std::int64_t whole = dim / kLanes<T> * kLanes<T>;
      for (std::int64_t d = 0; d < whole; d += kLanes<T>)
        store(out + d, load(a + d) * inv);
      for (std::int64_t d = whole; d < dim; ++d)
        out[d] = a[d] * inv;
      p.lse.at(b, h, q0 + r) = running_max[r] + std::log(running_sum[r]);
    } else {  // no visible key: zero output, as a fully masked softmax row
      for (std::int64_t d = 0; d < dim; ++d)
        out[d] = 0;
      p.lse.at(b, h, q0 + r) = -kInf<T>;
    }
  }
}

// ---- backward ---------------------------------------------------------------------------------

// lse of a query row as backward uses it: exp(score - lse) with lse = +inf gives 0 for rows that
// see no key (lse = -inf) without forming inf - inf.
template <class T>
T lse_for_backward(const Problem<T>& p, std::int64_t b, std::int64_t h, std::int64_t i) {
  const T lse = p.lse.at(b, h, i);
  return lse == -kInf<T> ? kInf<T> : lse;
}

// dS = P * (dP_dropped * mask - row_dot) * scale, elementwise over `n` (a multiple of lanes);
// without dropout the mask is all ones.
template <class T>
void score_gradient(T* ds, const T* prob, const T* dprob, const T* mask, const T* row_dot,
                    bool row_dot_is_vector, T scale, std::int64_t n) {
  constexpr std::int64_t W = kLanes<T>;
  for (std::int64_t c = 0; c < n; c += W) {
    Vec<T> dp = load(dprob + c);
    if (mask) dp *= load(mask + c);
    const Vec<T> dot = row_dot_is_vector ? load(row_dot + c) : splat(row_dot[0]);
    store(ds + c, load(prob + c) * (dp - dot) * scale);
  }
}

template <class T>
void backward_kv_block(const Problem<T>& p, std::int64_t b, std::int64_t hk, std::int64_t k0,
                       bool accumulate_dq, T* scratch) {
  constexpr std::int64_t W = kLanes<T>;
  const std::int64_t dim = p.head_dim, dim_pad = padded_head_dim(p);
  const std::int64_t cols = min_of(kBlockK, p.seq_k - k0);  // keys: the rows of every S^T tile
  const bool dropout = p.dropout_p > 0;
  Carver<T> carve(scratch);
  T* s_t = carve.take(kBlockK * kBlockQ);
  T* p_t = carve.take(kBlockK * kBlockQ);
  T* mask_t = carve.take(kBlockK * kBlockQ);
  T* dp_t = carve.take(kBlockK * kBlockQ);
  T* ds_t = carve.take(kBlockK * kBlockQ);
  T* dk_acc = carve.take(kBlockK * dim_pad);
  T* dv_acc = carve.take(kBlockK * dim_pad);
  T* q_pack = carve.take(kBlockQ * dim_pad);
  T* dout_pack = carve.take(kBlockQ * dim_pad);
  T* lse_cols = carve.take(kBlockQ);
  T* dot_cols = carve.take(kBlockQ);
  T* bias_col = carve.take(kBlockQ);
  for (std::int64_t i = 0; i < cols * dim_pad; ++i)
    dk_acc[i] = 0, dv_acc[i] = 0;

  // Padding keys get no gradient; a block of them only has its zeros to write.
  const std::uint8_t* padding = p.padding_from(b, k0);
  const TilePadding padded = tile_padding(padding, cols);
  if (padded == TilePadding::none) padding = nullptr;
  const T* k_rows = p.k.row(b, k0, hk);
  const T* v_rows = p.v.row(b, k0, hk);
  // The query block holding the first query that sees key k0; earlier ones see none of this block.
  const std::int64_t q_begin = p.causal ? max_of(0, k0 - p.key_shift()) / kBlockQ * kBlockQ : 0;
  const std::int64_t groups = padded == TilePadding::all ? 0 : p.group();
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t h = hk * p.group() + g;
    for (std::int64_t i0 = q_begin; i0 < p.seq_q; i0 += kBlockQ) {
      const std::int64_t rows = min_of(kBlockQ, p.seq_q - i0);  // queries: the columns
      const std::int64_t rows_pad = round_up(rows, W);
      const T* q_rows = p.q.row(b, i0, h);
      const T* dout_rows = p.dout.row(b, i0, h);
      for (std::int64_t c = 0; c < rows_pad; ++c) {
        lse_cols[c] = c < rows ? lse_for_backward(p, b, h, i0 + c) : kInf<T>;
        dot_cols[c] = c < rows ? p.row_dot.at(b, h, i0 + c) : T(0);
      }
      // Whether some query of this tile starts after some key of this block.
      const bool starts_after = p.first_key != nullptr && last_first_key(p, b, i0, rows) > k0;

      // P^T = exp(scale * K Q^T - lse), zero where query i0 + c may not see key k0 + j.
      const T* q_t = p.q_t.panel(b, h, i0 / kBlockQ);
      gemm<T, false>(cols, rows_pad, dim, k_rows, p.k.seq_stride, q_t, kBlockQ, s_t, rows_pad);
      for (std::int64_t j = 0; j < cols; ++j) {
        T* prob = p_t + j * rows_pad;
        if (padding != nullptr && padding[j] != 0) {  // no query sees it
          for (std::int64_t c = 0; c < rows_pad; ++c)
            prob[c] = 0;
          continue;
        }
        const T* score = s_t + j * rows_pad;
        if (p.bias != nullptr) {  // bias[h, i0 + c, k0 + j] down the column, 0 past the queries
          for (std::int64_t c = 0; c < rows_pad; ++c)
            bias_col[c] = c < rows ? *p.bias_row(h, i0 + c, k0 + j) : T(0);
          for (std::int64_t c = 0; c < rows_pad; c += W) {
            store(prob + c,
                  vexp(load(score + c) * p.scale + load(bias_col + c) - load(lse_cols + c)));
          }
        } else {
          for (std::int64_t c = 0; c < rows_pad; c += W) {
            store(prob + c, vexp(load(score + c) * p.scale - load(lse_cols + c)));
          }
        }
        if (p.causal) {
          const std::int64_t first = clamp_to(k0 + j - p.key_shift() - i0, 0, rows_pad);
          for (std::int64_t c = 0; c < first; ++c)
            prob[c] = 0;
        }
        if (starts_after) {  // queries whose first key comes after this one do not see it
          for (std::int64_t c = 0; c < rows; ++c) {
            if (p.first_key_of(b, i0 + c) > k0 + j) prob[c] = 0;
          }
        }
      }
      const T* p_dropped = p_t;
      if (dropout) {  // drawn along each query's keys, four per Philox block; zero where P = 0
        DropoutStream<T> stream(p.seed, p.dropout_p);
        for (std::int64_t c = 0; c < rows_pad; ++c) {
          const std::int64_t visible =
              c >= rows ? 0
                        : (p.causal ? clamp_to(i0 + c + p.key_shift() - k0 + 1, 0, cols) : cols);
          const std::uint64_t base = dropout_index(p, b, h, i0 + c, k0);
          for (std::int64_t j = 0; j < cols; ++j) {
            mask_t[j * rows_pad + c] = j < visible ? stream.multiplier(base + j) : T(0);
          }
        }
        for (std::int64_t i = 0; i < cols * rows_pad; i += W) {
          store(ds_t + i, load(p_t + i) * load(mask_t + i));
        }
        p_dropped = ds_t;
      }

      // dV += P_dropped^T dO;  dP^T = V dO^T;  dS^T = P^T (dP^T mask - rowdot) scale;
      // dK += dS^T Q;  dQ += dS K (fused mode).
      const Operand<T> dout_op =
          rows_operand(dout_rows, p.dout.seq_stride, rows, dim, dim_pad, dout_pack);
      gemm<T, true>(cols, dim_pad, rows, p_dropped, rows_pad, dout_op.data, dout_op.ld, dv_acc,
                    dim_pad);
      const T* dout_t = p.dout_t.panel(b, h, i0 / kBlockQ);
      gemm<T, false>(cols, rows_pad, dim, v_rows, p.v.seq_stride, dout_t, kBlockQ, dp_t, rows_pad);
      for (std::int64_t j = 0; j < cols; ++j) {
        score_gradient(ds_t + j * rows_pad, p_t + j * rows_pad, dp_t + j * rows_pad,
                       dropout ? mask_t + j * rows_pad : nullptr, dot_cols, true, p.scale,
                       rows_pad);
      }
      const Operand<T> q_op = rows_operand(q_rows, p.q.seq_stride, rows, dim, dim_pad, q_pack);
      gemm<T, true>(cols, dim_pad, rows, ds_t, rows_pad, q_op.data, q_op.ld, dk_acc, dim_pad);
      if (accumulate_dq) {  // dQ += (dS^T)^T K
        gemm<T, true, true>(rows, dim, cols, ds_t, rows_pad, k_rows, p.k.seq_stride,
                            p.dq.row(b, i0, h), p.dq.seq_stride);
      }
    }
  }

  for (std::int64_t j = 0; j < cols; ++j) {
    T* dk = p.dk.row(b, k0 + j, hk);
    T* dv = p.dv.row(b, k0 + j, hk);
    for (std::int64_t d = 0; d < dim; ++d) {
      dk[d] = dk_acc[j * dim_pad + d];
      dv[d] = dv_acc[j * dim_pad + d];
    }
  }
}

template <class T>
void backward_q_block(const Problem<T>& p, std::int64_t b, std::int64_t h, std::int64_t q0,
                      T* scratch) {
  constexpr std::int64_t W = kLanes<T>;
  const std::int64_t dim = p.head_dim, dim_pad = padded_head_dim(p);
  const std::int64_t rows = min_of(kBlockQ, p.seq_q - q0);
  const std::int64_t hk = h / p.group();
  const bool dropout = p.dropout_p > 0;
  Carver<T> carve(scratch);
  T* s = carve.take(kBlockQ * kBlockK);
  T* mask = carve.take(kBlockQ * kBlockK);
  T* dp = carve.take(kBlockQ * kBlockK);
  T* dq_acc = carve.take(kBlockQ * dim_pad);
  T* k_pack = carve.take(kBlockK * dim_pad);
  T* flags = carve.take(kBlockK);
  T* bias_row = carve.take(kBlockK);
  T* bias_grad = carve.take(kBlockK);
  for (std::int64_t i = 0; i < rows * dim_pad; ++i)
    dq_acc[i] = 0;

  const T* q_rows = p.q.row(b, q0, h);
  const T* dout_rows = p.dout.row(b, q0, h);
  const std::int64_t key_end = p.visible_key_end(q0 + rows);
  const std::int64_t key_begin = p.first_key_of_rows(b, q0, rows) / kBlockK * kBlockK;
  for (std::int64_t k0 = key_begin; k0 < key_end; k0 += kBlockK) {
    const std::int64_t cols = min_of(kBlockK, key_end - k0);
    const std::int64_t cols_pad = round_up(cols, W);
    const std::uint8_t* padding = p.padding_from(b, k0);
    const TilePadding padded = tile_padding(padding, cols);
    if (padded == TilePadding::all) continue;  // P = 0 on the whole tile
    const T* excluded =
        padded == TilePadding::some ? padding_flags(padding, cols, cols_pad, flags) : nullptr;
    const T* k_rows = p.k.row(b, k0, hk);
    const T* k_t = p.k_t.panel(b, hk, k0 / kBlockK);
    const T* v_t = p.v_t.panel(b, hk, k0 / kBlockK);
    gemm<T, false>(rows, cols_pad, dim, q_rows, p.q.seq_stride, k_t, kBlockK, s, cols_pad);
    gemm<T, false>(rows, cols_pad, dim, dout_rows, p.dout.seq_stride, v_t, kBlockK, dp, cols_pad);
    std::int64_t widest = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t visible =
          p.causal ? clamp_to(q0 + r + p.key_shift() - k0 + 1, 0, cols) : cols;
      widest = max_of(widest, visible);
      T* row = s + r * cols_pad;
      const T lse = lse_for_backward(p, b, h, q0 + r);
      const T* bias = nullptr;
      if (p.bias != nullptr) {  // this row's bias, 0 past the tile's keys
        const T* from = p.bias_row(h, q0 + r, k0);
        for (std::int64_t c = 0; c < cols_pad; ++c)
          bias_row[c] = c < cols ? from[c] : T(0);
        bias = bias_row;
      }
      if (excluded == nullptr && bias == nullptr) {
        for (std::int64_t c = 0; c < cols_pad; c += W) {
          store(row + c, vexp(load(row + c) * p.scale - lse));
        }
      } else {  // a select, not a product: exp of an excluded score may overflow
        for (std::int64_t c = 0; c < cols_pad; c += W) {
          const Vec<T> score = load(row + c) * p.scale;
          const Vec<T> prob = vexp((bias ? score + load(bias + c) : score) - lse);
          store(row + c, excluded != nullptr && load(excluded + c) != Vec<T>{} ? Vec<T>{} : prob);
        }
      }
      for (std::int64_t c = visible; c < cols_pad; ++c)
        row[c] = 0;
      const std::int64_t hidden = clamp_to(p.first_key_of(b, q0 + r) - k0, 0, cols);
      for (std::int64_t c = 0; c < hidden; ++c)  // before the row's first key
        row[c] = 0;
      T* mask_row = mask + r * cols_pad;
      if (dropout) {  // only visible entries matter: the others have P = 0
        DropoutStream<T> stream(p.seed, p.dropout_p);
        const std::uint64_t base = dropout_index(p, b, h, q0 + r, k0);
        for (std::int64_t c = 0; c < cols_pad; ++c) {
          mask_row[c] = c < visible ? stream.multiplier(base + c) : T(0);
        }
      }
      const T dot = p.row_dot.at(b, h, q0 + r);
      if (p.dbias == nullptr) {
        score_gradient(row, row, dp + r * cols_pad, dropout ? mask_row : nullptr, &dot, false,
                       p.scale, cols_pad);
      } else {  // the bias's gradient is the score gradient before `scale`: same bits after it
        score_gradient(bias_grad, row, dp + r * cols_pad, dropout ? mask_row : nullptr, &dot, false,
                       T(1), cols_pad);
        T* dbias = p.dbias_row(h, q0 + r, k0);
        for (std::int64_t c = 0; c < cols; ++c)
          dbias[c] += bias_grad[c];
        for (std::int64_t c = 0; c < cols_pad; c += W)
          store(row + c, load(bias_grad + c) * p.scale);
      }
    }
    const Operand<T> k_op = rows_operand(k_rows, p.k.seq_stride, widest, dim, dim_pad, k_pack);
    gemm<T, true>(rows, dim_pad, widest, s, cols_pad, k_op.data, k_op.ld, dq_acc, dim_pad);
  }

  for (std::int64_t r = 0; r < rows; ++r) {
    T* dq = p.dq.row(b, q0 + r, h);
    for (std::int64_t d = 0; d < dim; ++d)
      dq[d] = dq_acc[r * dim_pad + d];
  }
}

template <class T>
constexpr Kernels<T> kernel_table(const char* isa) {
  return Kernels<T>{isa,
                    &scratch_elements<T>,
                    &forward_block<T>,
                    &backward_kv_block<T>,
                    &backward_q_block<T>,
                    kLanes<T>};
}

}  // namespace
}  // namespace megatron::cpu::attention
