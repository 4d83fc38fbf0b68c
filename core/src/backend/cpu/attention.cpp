// CPU fused attention (FlashAttention-2 over 64 x 64 tiles): argument checks, the choice of tile
// kernels for this CPU (attention_avx512/avx2/generic.cpp) and the parallel loops over blocks.
//
// Forward runs one task per (batch, head, query block). Backward computes dk and dv per
// (batch, kv head, key block), so each has one writer; dq is either accumulated by the same task
// when one task owns all key blocks of a (batch, kv head) — chosen when there are enough such
// pairs to keep the threads busy — or computed in a second pass per (batch, head, query block).
// Neither choice depends on the thread count, so results are bitwise identical for any count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/blas_capabilities.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/op_argument_checks.h"

namespace megatron::cpu {
namespace attention {
namespace {

enum class Isa { generic = 0, avx2 = 1, avx512 = 2 };

Isa best_isa() {
  static const Isa best = [] {
    switch (cpu_isa_level()) {
      case IsaLevel::avx512:
        return Isa::avx512;
      case IsaLevel::avx2:
        return Isa::avx2;
      default:
        return Isa::generic;
    }
  }();
  return best;
}

// The best instruction set, or a lower one named by MEGATRON_CPU_ISA (to test every kernel
// variant on one machine); a request above what the CPU has gets the best it has.
Isa chosen_isa() {
  const Isa best = best_isa();
  const char* env = std::getenv("MEGATRON_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string name = env;
  Isa wanted;
  if (name == "avx512") {
    wanted = Isa::avx512;
  } else if (name == "avx2") {
    wanted = Isa::avx2;
  } else if (name == "generic") {
    wanted = Isa::generic;
  } else {
    throw Error("MEGATRON_CPU_ISA must be avx512, avx2 or generic, got '" + name + "'");
  }
  return static_cast<int>(wanted) < static_cast<int>(best) ? wanted : best;
}

}  // namespace

const Kernels<float>& kernels_f32() {
  switch (chosen_isa()) {
    case Isa::avx512:
      return avx512_kernels_f32();
    case Isa::avx2:
      return avx2_kernels_f32();
    default:
      return generic_kernels_f32();
  }
}

const Kernels<double>& kernels_f64() {
  switch (chosen_isa()) {
    case Isa::avx512:
      return avx512_kernels_f64();
    case Isa::avx2:
      return avx2_kernels_f64();
    default:
      return generic_kernels_f64();
  }
}

namespace {

template <typename T>
const Kernels<T>& kernels_for();
template <>
const Kernels<float>& kernels_for<float>() {
  return kernels_f32();
}
template <>
const Kernels<double>& kernels_for<double>() {
  return kernels_f64();
}

// At least this many (batch, kv head) pairs let backward give each pair to one task (and skip
// the second pass for dq); fewer would leave threads idle.
constexpr std::int64_t kFusedBackwardMinPairs = 8;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// 64-byte-aligned per-thread scratch.
template <typename T>
std::unique_ptr<T[], FreeDeleter> scratch_buffer(std::size_t elements) {
  const std::size_t bytes = (elements * sizeof(T) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  if (p == nullptr) throw Error("attention: out of memory for " + std::to_string(bytes) + " bytes");
  return std::unique_ptr<T[], FreeDeleter>(static_cast<T*>(p));
}

template <typename T>
Bshd<T> bshd(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2)};
}
template <typename T>
Bhs<T> bhs(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2)};
}

// Runs fn(task, scratch) for task in [0, tasks) on the compute threads, each thread with its own
// scratch; tasks are handed out dynamically since causal blocks differ in cost.
template <typename T, typename Fn>
void parallel_tasks(std::int64_t tasks, std::size_t scratch_elements, Fn&& fn) {
  if (tasks <= 0) return;
  std::exception_ptr failure;
#pragma omp parallel if (tasks > 1)
  {
    std::unique_ptr<T[], FreeDeleter> scratch;
    try {
      scratch = scratch_buffer<T>(scratch_elements);
    } catch (...) {
#pragma omp critical(megatron_attention_failure)
      if (!failure) failure = std::current_exception();
    }
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      if (scratch) fn(task, scratch.get());
    }
  }
  if (failure) std::rethrow_exception(failure);
}

using Shapes = ops::AttentionShapes;

void check_host(const char* op, const char* name, const Tensor& t) {
  ops::check_device(op, name, t, Device::cpu());
}

void check_bshd(const char* op, const char* name, const Tensor& t, const Tensor& q) {
  ops::check_attention_bshd(op, name, t, q, Device::cpu());
}

// Checks q, k, v and params; returns the sizes.
Shapes check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                    const AttentionParams& params) {
  return ops::check_attention_args(op, q, k, v, params, Device::cpu());
}

void check_lse(const char* op, const Tensor& lse, const Tensor& q, const Shapes& s) {
  check_host(op, "lse", lse);
  ops::check_shape(op, "lse", lse, {s.batch, s.heads_q, s.seq_q});
  ops::check_same_dtype(op, "lse", lse, "q", q);
}

template <typename T>
Problem<T> make_problem(const Shapes& s, const AttentionParams& params, const Tensor& q,
                        const Tensor& k, const Tensor& v) {
  Problem<T> p;
  p.batch = s.batch, p.seq_q = s.seq_q, p.seq_k = s.seq_k;
  p.heads_q = s.heads_q, p.heads_kv = s.heads_kv, p.head_dim = s.head_dim;
  p.scale = static_cast<T>(params.scale);
  p.causal = params.causal;
  p.dropout_p = params.dropout_p;
  p.seed = params.seed, p.offset = params.offset;
  const Tensor& padding = params.key_padding_mask;  // checked: (B, Sk) u8, contiguous
  if (padding.defined() && padding.numel() > 0) {
    p.key_padding = static_cast<const std::uint8_t*>(padding.raw_data());
  }
  const Tensor& first = params.first_key;  // checked: (B, Sq) i32, contiguous
  if (first.defined() && first.numel() > 0) {
    p.first_key = static_cast<const std::int32_t*>(first.raw_data());
  }
  if (params.bias.defined() && params.bias.numel() > 0) {  // checked: (Hq, Sq, Sk), contiguous
    p.bias = static_cast<const T*>(params.bias.raw_data());
  }
  p.q = bshd<const T>(q), p.k = bshd<const T>(k), p.v = bshd<const T>(v);
  return p;
}

std::int64_t blocks(std::int64_t n, std::int64_t block) {
  return (n + block - 1) / block;
}

template <typename T>
struct PanelBuffer {
  std::unique_ptr<T[], FreeDeleter> memory;
  Panels<T> panels;
};

// The transposed panels of `src` (B, seq, heads, D): one pass over the tensor, instead of a
// transpose for every tile pair that reads it.
template <typename T>
PanelBuffer<T> transposed_panels(const Bshd<const T>& src, std::int64_t batch, std::int64_t seq,
                                 std::int64_t heads, std::int64_t dim, std::int64_t block) {
  const std::int64_t per_head = blocks(seq, block), panel = dim * block;
  const std::int64_t count = batch * heads * per_head;
  PanelBuffer<T> buffer{scratch_buffer<T>(static_cast<std::size_t>(count * panel)), {}};
  T* data = buffer.memory.get();
#pragma omp parallel for schedule(static)
  for (std::int64_t index = 0; index < count; ++index) {
    const std::int64_t bh = index / per_head, first = index % per_head * block;
    const std::int64_t rows = std::min(block, seq - first);
    T* dst = data + index * panel;
    // Eight source rows at a time, so each panel row is written in runs of eight.
    constexpr std::int64_t kRun = 8;
    const T* row[kRun];
    for (std::int64_t j0 = 0; j0 < block; j0 += kRun) {
      for (std::int64_t j = 0; j < kRun; ++j) {
        row[j] = j0 + j < rows ? src.row(bh / heads, first + j0 + j, bh % heads) : nullptr;
      }
      for (std::int64_t d = 0; d < dim; ++d) {
        for (std::int64_t j = 0; j < kRun; ++j)
          dst[d * block + j0 + j] = row[j] ? row[j][d] : T(0);
      }
    }
  }
  buffer.panels = {data, heads, per_head, dim, block};
  return buffer;
}

template <typename T>
void forward(Problem<T>& p) {
  const Kernels<T>& kernels = kernels_for<T>();
  const PanelBuffer<T> k_t =
      transposed_panels(p.k, p.batch, p.seq_k, p.heads_kv, p.head_dim, kBlockK);
  p.k_t = k_t.panels;
  const std::int64_t q_blocks = blocks(p.seq_q, kBlockQ);
  const std::int64_t heads = p.batch * p.heads_q;
  // Later query blocks see more keys under the causal mask: hand them out first.
  parallel_tasks<T>(
      heads * q_blocks, kernels.scratch_elements(p), [&](std::int64_t task, T* scratch) {
        const std::int64_t qb = q_blocks - 1 - task / heads, bh = task % heads;
        kernels.forward_block(p, bh / p.heads_q, bh % p.heads_q, qb * kBlockQ, scratch);
      });
}

// rowsum(dout * out) for every query row (FlashAttention-2's D), f32 or f64 like the inputs.
template <typename T>
void row_dots(const Problem<T>& p, T* dots) {
  const std::int64_t rows = p.batch * p.heads_q * p.seq_q;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t i = r % p.seq_q, bh = r / p.seq_q;
    const std::int64_t b = bh / p.heads_q, h = bh % p.heads_q;
    const T* dout = p.dout.row(b, i, h);
    const T* out = p.out_in.row(b, i, h);
    T sum = 0;
    // A vectorised reduction: its order is fixed at compile time, not by the thread count.
#pragma omp simd reduction(+ : sum)
    for (std::int64_t d = 0; d < p.head_dim; ++d)
      sum += dout[d] * out[d];
    dots[r] = sum;
  }
}

template <typename T>
void backward(Problem<T>& p) {
  const Kernels<T>& kernels = kernels_for<T>();
  const std::size_t scratch = kernels.scratch_elements(p);
  auto dots = scratch_buffer<T>(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q));
  row_dots(p, dots.get());
  p.row_dot = {dots.get(), p.heads_q * p.seq_q, p.seq_q, 1};

  const std::int64_t k_blocks = blocks(p.seq_k, kBlockK);
  const std::int64_t pairs = p.batch * p.heads_kv;
  // The bias gradient is summed in the dq pass, so a bias gradient takes the two-pass path.
  const bool fused = pairs >= kFusedBackwardMinPairs &&
                     p.head_dim % kernels.dq_vector_multiple == 0 && p.dbias == nullptr;
  const PanelBuffer<T> q_t =
      transposed_panels(p.q, p.batch, p.seq_q, p.heads_q, p.head_dim, kBlockQ);
  const PanelBuffer<T> dout_t =
      transposed_panels(p.dout, p.batch, p.seq_q, p.heads_q, p.head_dim, kBlockQ);
  p.q_t = q_t.panels, p.dout_t = dout_t.panels;
  if (fused) {
    parallel_tasks<T>(pairs, scratch, [&](std::int64_t pair, T* buffer) {
      const std::int64_t b = pair / p.heads_kv, hk = pair % p.heads_kv;
      for (std::int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
        for (std::int64_t i = 0; i < p.seq_q; ++i) {
          std::memset(p.dq.row(b, i, h), 0, sizeof(T) * static_cast<std::size_t>(p.head_dim));
        }
      }
      for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
        kernels.backward_kv_block(p, b, hk, kb * kBlockK, true, buffer);
      }
    });
    return;
  }
  // Earlier key blocks are seen by more queries under the causal mask: hand them out first.
  parallel_tasks<T>(pairs * k_blocks, scratch, [&](std::int64_t task, T* buffer) {
    const std::int64_t kb = task / pairs, pair = task % pairs;
    kernels.backward_kv_block(p, pair / p.heads_kv, pair % p.heads_kv, kb * kBlockK, false, buffer);
  });
  const PanelBuffer<T> k_t =
      transposed_panels(p.k, p.batch, p.seq_k, p.heads_kv, p.head_dim, kBlockK);
  const PanelBuffer<T> v_t =
      transposed_panels(p.v, p.batch, p.seq_k, p.heads_kv, p.head_dim, kBlockK);
  p.k_t = k_t.panels, p.v_t = v_t.panels;
  const std::int64_t q_blocks = blocks(p.seq_q, kBlockQ);
  if (p.dbias != nullptr) {
    // One task per (head, query block) runs the samples in order: each dbias row is summed over
    // the batch by one thread in a fixed order.
    parallel_tasks<T>(p.heads_q * q_blocks, scratch, [&](std::int64_t task, T* buffer) {
      const std::int64_t qb = q_blocks - 1 - task / p.heads_q, h = task % p.heads_q;
      const std::int64_t q0 = qb * kBlockQ, rows = std::min(kBlockQ, p.seq_q - q0);
      std::memset(p.dbias_row(h, q0, 0), 0, sizeof(T) * static_cast<std::size_t>(rows * p.seq_k));
      for (std::int64_t b = 0; b < p.batch; ++b)
        kernels.backward_q_block(p, b, h, q0, buffer);
    });
    return;
  }
  const std::int64_t heads = p.batch * p.heads_q;
  parallel_tasks<T>(heads * q_blocks, scratch, [&](std::int64_t task, T* buffer) {
    const std::int64_t qb = q_blocks - 1 - task / heads, bh = task % heads;
    kernels.backward_q_block(p, bh / p.heads_q, bh % p.heads_q, qb * kBlockQ, buffer);
  });
}

}  // namespace
}  // namespace attention

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const AttentionParams& params, Tensor& out, Tensor& lse) {
  constexpr const char* op = "attention_forward";
  const attention::Shapes s = attention::check_inputs(op, q, k, v, params);
  attention::check_bshd(op, "out", out, q);
  ops::check_same_shape(op, "out", out, "q", q);
  attention::check_lse(op, lse, q, s);
  if (out.numel() == 0 && lse.numel() == 0) return;
  dispatch_float(op, q.dtype(), [&]<typename T>() {
    attention::Problem<T> p = attention::make_problem<T>(s, params, q, k, v);
    p.out = attention::bshd<T>(out);
    p.lse = attention::bhs<T>(lse);
    attention::forward(p);
  });
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const AttentionParams& params, Tensor& dq, Tensor& dk,
                                    Tensor& dv, Tensor* dbias) {
  constexpr const char* op = "attention_backward";
  const attention::Shapes s = attention::check_inputs(op, q, k, v, params);
  attention::check_bshd(op, "dout", dout, q);
  ops::check_same_shape(op, "dout", dout, "q", q);
  attention::check_bshd(op, "out", out, q);
  ops::check_same_shape(op, "out", out, "q", q);
  attention::check_lse(op, lse, q, s);
  attention::check_bshd(op, "dq", dq, q);
  ops::check_same_shape(op, "dq", dq, "q", q);
  attention::check_bshd(op, "dk", dk, q);
  ops::check_same_shape(op, "dk", dk, "k", k);
  attention::check_bshd(op, "dv", dv, q);
  ops::check_same_shape(op, "dv", dv, "v", v);
  ops::check_bias_grad(op, dbias, params, q, s, Device::cpu());
  if (dbias && dq.numel() == 0) fill(*dbias, 0.0);
  if (dq.numel() == 0 && dk.numel() == 0) return;
  dispatch_float(op, q.dtype(), [&]<typename T>() {
    attention::Problem<T> p = attention::make_problem<T>(s, params, q, k, v);
    p.lse = attention::bhs<T>(lse);
    p.out_in = attention::bshd<const T>(out);
    p.dout = attention::bshd<const T>(dout);
    p.dq = attention::bshd<T>(dq), p.dk = attention::bshd<T>(dk), p.dv = attention::bshd<T>(dv);
    if (dbias && dbias->numel() > 0) p.dbias = static_cast<T*>(dbias->raw_data());
    attention::backward(p);
  });
}

void CpuBackend::attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out,
                                 const Tensor& part_lse) {
  constexpr const char* op = "attention_merge";
  ops::check_attention_merge(op, out, lse, part_out, part_lse, Device::cpu());
  const std::int64_t b_n = out.size(0), s_n = out.size(1), h_n = out.size(2), d_n = out.size(3);
  dispatch_float(op, out.dtype(), [&]<typename T>() {
    const attention::Bshd<T> o = attention::bshd<T>(out);
    const attention::Bshd<const T> po = attention::bshd<const T>(part_out);
    const attention::Bhs<T> l = attention::bhs<T>(lse);
    const attention::Bhs<const T> pl = attention::bhs<const T>(part_lse);
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t b = 0; b < b_n; ++b)
      for (std::int64_t h = 0; h < h_n; ++h)
        for (std::int64_t s = 0; s < s_n; ++s) {
          T& lse_row = l.at(b, h, s);
          const T part = pl.at(b, h, s);
          if (part == -std::numeric_limits<T>::infinity()) continue;
          const T merged =
              lse_row == -std::numeric_limits<T>::infinity()
                  ? part
                  : std::max(lse_row, part) + std::log1p(std::exp(-std::abs(lse_row - part)));
          const T keep = std::exp(lse_row - merged), take = std::exp(part - merged);
          T* row = o.row(b, s, h);
          const T* part_row = po.row(b, s, h);
          for (std::int64_t d = 0; d < d_n; ++d)
            row[d] = row[d] * keep + part_row[d] * take;
          lse_row = merged;
        }
  });
}

}  // namespace megatron::cpu
