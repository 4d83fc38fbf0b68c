// Row access for the CPU row kernels (elementwise, norms, softmax): every tensor is seen as rows
// with a contiguous last dimension so inner loops vectorise; the rare tensor whose last dimension
// is strided goes through a contiguous buffer instead.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "megatron/backend/backend.h"

// Row kernels built for AVX-512 and AVX2+FMA as well as baseline x86-64, picked at load time by
// the CPU (ifunc), so one binary runs anywhere and uses the wide units where they exist. Results
// are the same for any thread count on a given machine (reductions may group differently per ISA).
#if defined(__x86_64__) && !defined(__CUDACC__)
#define MEGATRON_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MEGATRON_CPU_CLONES
#endif

namespace megatron::cpu {

inline bool last_dim_contiguous(const Tensor& t) {
  return t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1;
}

inline std::int64_t last_dim(const Tensor& t) {
  return t.dim() == 0 ? 1 : t.size(-1);
}

inline Tensor contiguous_copy(const Tensor& t) {
  Tensor copy = Tensor::empty(t.shape(), t.dtype());
  backend_for(Device::cpu()).copy(t, copy);
  return copy;
}

// Read-only rows of a host tensor of element type T.
template <typename T>
class RowsIn {
 public:
  explicit RowsIn(const Tensor& t)
      : holder_(last_dim_contiguous(t) ? t : contiguous_copy(t)),
        contiguous_(holder_.is_contiguous()),
        base_(holder_.numel() ? holder_.template data<T>() : nullptr) {
    if (!contiguous_) offsets_ = row_offsets(holder_);
  }
  // Whether the rows lie back to back, so any run of logical elements is one span.
  bool contiguous() const { return contiguous_; }
  const T* row(std::int64_t r) const {
    return base_ + (contiguous_ ? r * last_dim(holder_) : offsets_[static_cast<std::size_t>(r)]);
  }
  // Logical element `first` of row `r` (first = r * N + column); for contiguous tensors r is
  // unused.
  const T* at(std::int64_t first, std::int64_t r) const {
    return contiguous_ ? base_ + first : row(r) + (first - r * last_dim(holder_));
  }

 private:
  Tensor holder_;
  bool contiguous_;
  const T* base_;
  std::vector<std::int64_t> offsets_;
};

// Writable rows of a host tensor; a tensor with a strided last dimension is written through a
// contiguous buffer (holding its current values when `keep_contents`, for accumulation) that
// finish() copies back.
template <typename T>
class RowsOut {
 public:
  RowsOut(Tensor& t, bool keep_contents) : target_(t) {
    if (!last_dim_contiguous(t)) {
      buffer_ = keep_contents ? contiguous_copy(t) : Tensor::empty(t.shape(), t.dtype());
    }
    const Tensor& rows = buffer_.defined() ? buffer_ : target_;
    contiguous_ = rows.is_contiguous();
    n_ = last_dim(rows);
    base_ = rows.numel() ? rows.template data<T>() : nullptr;
    if (!contiguous_) offsets_ = row_offsets(rows);
  }
  bool contiguous() const { return contiguous_; }
  T* row(std::int64_t r) const {
    return base_ + (contiguous_ ? r * n_ : offsets_[static_cast<std::size_t>(r)]);
  }
  T* at(std::int64_t first, std::int64_t r) const {
    return contiguous_ ? base_ + first : row(r) + (first - r * n_);
  }
  void finish() {
    if (buffer_.defined()) backend_for(Device::cpu()).copy(buffer_, target_);
  }

 private:
  Tensor& target_;
  Tensor buffer_;
  bool contiguous_ = true;
  std::int64_t n_ = 1;
  T* base_ = nullptr;
  std::vector<std::int64_t> offsets_;
};

// Below this many elements a parallel region costs more than it saves (waking threads on a
// shared machine takes microseconds to milliseconds). The choice depends only on the shape.
inline constexpr std::int64_t kParallelElements = 1 << 15;

// Runs span(first, count, row) over all `numel` logical elements of tensors whose rows have `n`
// elements, in parallel: when every tensor is contiguous (`flat`) in fixed-size pieces of the
// flat array (row = first / n, meaningful only to callers that ignore it), otherwise row by row.
// Each element is computed once by one thread, so results do not depend on the thread count.
template <typename Fn>
void for_each_span(std::int64_t numel, std::int64_t n, bool flat, Fn&& span) {
  if (numel == 0) return;
  const bool parallel = numel >= kParallelElements;
  if (flat) {
    constexpr std::int64_t kPiece = 16384;
    const std::int64_t pieces = (numel + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t p = 0; p < pieces; ++p) {
      const std::int64_t first = p * kPiece;
      span(first, std::min(kPiece, numel - first), first / n);
    }
    return;
  }
  const std::int64_t rows = numel / n;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t r = 0; r < rows; ++r)
    span(r * n, n, r);
}

// Runs body(r) for every one of `rows` rows of `n` elements, in parallel when worth it (for
// kernels that need whole rows).
template <typename Fn>
void for_each_row(std::int64_t rows, std::int64_t n, Fn&& body) {
#pragma omp parallel for schedule(static) if (rows > 1 && rows * n >= kParallelElements)
  for (std::int64_t r = 0; r < rows; ++r)
    body(r);
}

// Runs body(chunk) for every chunk of a ChunkedColumnSums over `rows` x `n`, in parallel when worth
// it.
template <typename Sums, typename Fn>
void for_each_chunk(const Sums& sums, std::int64_t rows, std::int64_t n, Fn&& body) {
  const std::int64_t chunks = sums.chunks();
#pragma omp parallel for schedule(static) if (chunks > 1 && rows * n >= kParallelElements)
  for (std::int64_t c = 0; c < chunks; ++c)
    body(c);
}

// Sums over rows done the same way for any thread count: rows are cut into fixed chunks of
// kRowsPerChunk, each chunk adds its rows in order into its own zeroed partial vectors (one per
// quantity), and reduce() adds the chunk partials in chunk order.
template <typename T>
class ChunkedColumnSums {
 public:
  static constexpr std::int64_t kRowsPerChunk = 32;

  ChunkedColumnSums(std::int64_t rows, std::int64_t n, int quantities)
      : n_(n),
        chunks_((rows + kRowsPerChunk - 1) / kRowsPerChunk),
        partials_(static_cast<std::size_t>(chunks_ * n * quantities), T(0)) {}

  std::int64_t chunks() const { return chunks_; }
  std::int64_t first_row(std::int64_t chunk) const { return chunk * kRowsPerChunk; }
  std::int64_t end_row(std::int64_t chunk, std::int64_t rows) const {
    return std::min(rows, (chunk + 1) * kRowsPerChunk);
  }
  T* partial(std::int64_t chunk, int quantity) {
    return partials_.data() + (static_cast<std::int64_t>(quantity) * chunks_ + chunk) * n_;
  }
  // out[j] (+)= sum over chunks of partial(chunk, quantity)[j], out contiguous with n elements.
  void reduce(int quantity, T* out, bool accumulate) {
    constexpr std::int64_t kColumns = 1024;
    const std::int64_t blocks = (n_ + kColumns - 1) / kColumns;
#pragma omp parallel for schedule(static) if (blocks > 1 && chunks_ * n_ >= kParallelElements)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t j0 = b * kColumns, j1 = std::min(n_, j0 + kColumns);
      T sum[kColumns];
      for (std::int64_t j = j0; j < j1; ++j)
        sum[j - j0] = T(0);
      for (std::int64_t c = 0; c < chunks_; ++c) {
        const T* p = partial(c, quantity);
#pragma omp simd
        for (std::int64_t j = j0; j < j1; ++j)
          sum[j - j0] += p[j];
      }
      // Added last, so accumulating gives exactly the old value plus the overwriting result.
      for (std::int64_t j = j0; j < j1; ++j)
        out[j] = accumulate ? out[j] + sum[j - j0] : sum[j - j0];
    }
  }

 private:
  std::int64_t n_;
  std::int64_t chunks_;
  std::vector<T> partials_;
};

// Argument checks common to the float row ops.
inline void check_float_host(const char* op, const char* name, const Tensor& t) {
  ops::check_device(op, name, t, Device::cpu());
  ops::check_dtype(op, name, t, {DType::f32, DType::f64});
}

}  // namespace megatron::cpu
