// Fused CPU attention: the problem description shared by the dispatcher (attention.cpp) and the
// per-instruction-set tile kernels (attention_avx512.cpp, attention_avx2.cpp,
// attention_generic.cpp), and the table of kernel entry points each of those provides.
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron::cpu::attention {

// Queries and keys per tile. 64 x 64 keeps a score tile and its operands in L1/L2 while the
// tile products are long enough to run the vector units near peak.
inline constexpr std::int64_t kBlockQ = 64;
inline constexpr std::int64_t kBlockK = 64;

// A logical (B, S, H, D) tensor with element strides for B, S and H; D is contiguous.
template <typename T>
struct Bshd {
  T* data = nullptr;
  std::int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
  T* row(std::int64_t b, std::int64_t s, std::int64_t h) const {
    return data + b * batch_stride + s * seq_stride + h * head_stride;
  }
};

// A logical (B, H, S) tensor (lse, and the per-row dot products of backward).
template <typename T>
struct Bhs {
  T* data = nullptr;
  std::int64_t batch_stride = 0, head_stride = 0, seq_stride = 0;
  T& at(std::int64_t b, std::int64_t h, std::int64_t s) const {
    return data[b * batch_stride + h * head_stride + s * seq_stride];
  }
};

// Transposed copies of a (B, S, H, D) tensor made once per call, so that every tile product
// reads its right-hand operand contiguously: for each (b, h), one (D x block) panel per `block`
// rows, zero past S. Same size as the tensor (rounded up to whole blocks).
template <typename T>
struct Panels {
  const T* data = nullptr;
  std::int64_t heads = 0, blocks = 0, dim = 0, block = 0;
  const T* panel(std::int64_t b, std::int64_t h, std::int64_t index) const {
    return data + ((b * heads + h) * blocks + index) * dim * block;
  }
};

template <typename T>
struct Problem {
  std::int64_t batch = 0, seq_q = 0, seq_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  T scale = 0;
  bool causal = false;
  float dropout_p = 0;
  std::uint64_t seed = 0, offset = 0;
  // Key padding, (B, Sk) row-major: key j of sample b is excluded when key_padding[b * seq_k + j]
  // is non-zero; null when no key is padding.
  const std::uint8_t* key_padding = nullptr;
  // First key per query, (B, Sq) row-major: query i of sample b sees no key before
  // first_key[b * seq_q + i]; null when every query may see key 0.
  const std::int32_t* first_key = nullptr;
  // Additive score bias (Hq, Sq, Sk) row-major, added after scaling; null when none. With dbias
  // (same shape, backward only), its gradient summed over the batch is written there.
  const T* bias = nullptr;
  T* dbias = nullptr;

  Bshd<const T> q, k, v;
  Panels<T> k_t;  // always
  Bshd<T> out;    // forward output
  Bhs<T> lse;     // forward output; read by backward
  // Backward only.
  Bshd<const T> out_in, dout;
  Bhs<const T> row_dot;   // rowsum(dout * out) per query row, computed by the dispatcher
  Panels<T> q_t, dout_t;  // for backward_kv_block
  Panels<T> v_t;          // for backward_q_block
  Bshd<T> dq, dk, dv;

  std::int64_t group() const { return heads_q / heads_kv; }
  // Bottom-right causal alignment: query i sees keys j <= i + key_shift().
  std::int64_t key_shift() const { return seq_k - seq_q; }
  // Keys [0, end) that any of queries [0, query_end) can see.
  std::int64_t visible_key_end(std::int64_t query_end) const {
    if (!causal) return seq_k;
    const std::int64_t end = query_end + key_shift();
    return end < 0 ? 0 : (end > seq_k ? seq_k : end);
  }
  // bias[h, i, j...] (null without a bias) and dbias[h, i, j...].
  const T* bias_row(std::int64_t h, std::int64_t i, std::int64_t j) const {
    return bias ? bias + (h * seq_q + i) * seq_k + j : nullptr;
  }
  T* dbias_row(std::int64_t h, std::int64_t i, std::int64_t j) const {
    return dbias + (h * seq_q + i) * seq_k + j;
  }
  // The first key query i of sample b may see (0 without first_key).
  std::int64_t first_key_of(std::int64_t b, std::int64_t i) const {
    return first_key ? first_key[b * seq_q + i] : 0;
  }
  // The first key any of queries [q0, q0 + rows) of sample b may see.
  std::int64_t first_key_of_rows(std::int64_t b, std::int64_t q0, std::int64_t rows) const {
    if (!first_key) return 0;
    std::int64_t first = seq_k;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t f = first_key[b * seq_q + q0 + r];
      first = f < first ? f : first;
    }
    return first < 0 ? 0 : first;
  }
  // The padding flags of keys [k0, ...) of sample b, or null when there is no padding.
  const std::uint8_t* padding_from(std::int64_t b, std::int64_t k0) const {
    return key_padding ? key_padding + b * seq_k + k0 : nullptr;
  }
};

// Entry points of one instruction set's kernels for element type T. Each works on one block and
// writes only that block's outputs, so blocks run in parallel in any order with identical bits.
template <typename T>
struct Kernels {
  const char* isa;
  // Elements of per-thread scratch the functions below need for this problem.
  std::size_t (*scratch_elements)(const Problem<T>& p);
  // out and lse for queries [q0, q0 + kBlockQ) of (b, h).
  void (*forward_block)(const Problem<T>& p, std::int64_t b, std::int64_t h, std::int64_t q0,
                        T* scratch);
  // dk and dv for keys [k0, k0 + kBlockK) of (b, kv head hk), summed over the query heads of its
  // group. With accumulate_dq, also adds this block's share of dq for those heads into p.dq
  // (which the caller zeroed); only valid when one thread owns all key blocks of (b, hk) and
  // head_dim is a multiple of dq_vector_multiple.
  void (*backward_kv_block)(const Problem<T>& p, std::int64_t b, std::int64_t hk, std::int64_t k0,
                            bool accumulate_dq, T* scratch);
  // dq for queries [q0, q0 + kBlockQ) of (b, h); with p.dbias, also adds this sample's share of
  // the bias gradient to dbias rows [q0, q0 + kBlockQ) of head h (the caller zeroed them and runs
  // the samples of one (h, q0) in order, so the sums are deterministic).
  void (*backward_q_block)(const Problem<T>& p, std::int64_t b, std::int64_t h, std::int64_t q0,
                           T* scratch);
  std::int64_t dq_vector_multiple;
};

// The kernels for the best instruction set this CPU supports (or the one named by the
// environment variable MEGATRON_CPU_ISA = avx512 | avx2 | generic, when the CPU has it).
const Kernels<float>& kernels_f32();
const Kernels<double>& kernels_f64();

// Per-ISA tables (each defined in its own file, compiled for that instruction set).
const Kernels<float>& avx512_kernels_f32();
const Kernels<double>& avx512_kernels_f64();
const Kernels<float>& avx2_kernels_f32();
const Kernels<double>& avx2_kernels_f64();
const Kernels<float>& generic_kernels_f32();
const Kernels<double>& generic_kernels_f64();

}  // namespace megatron::cpu::attention
