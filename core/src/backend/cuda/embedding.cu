// CUDA embedding lookup for a (vocabulary-parallel) shard of the table, and its deterministic
// gradient: tokens are stably sorted by table row (CUB radix sort), then each row adds its tokens'
// gradients in token order, exactly as the CPU backend does, without atomics.
#include <cub/device/device_radix_sort.cuh>

#include <limits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::cuda {

namespace {

// The shard row of token t, or `rows` (sorts last, skipped) for ids outside the shard.
template <typename Id>
__device__ __forceinline__ std::int64_t shard_row(const Id* ids, std::int64_t stride,
                                                  std::int64_t t, std::int64_t vocab_start,
                                                  std::int64_t rows) {
  const std::int64_t local = static_cast<std::int64_t>(ids[t * stride]) - vocab_start;
  return local >= 0 && local < rows ? local : rows;
}

// out[t][j] = table[row(t)][j], or 0 (all-zero bits) outside the shard; U moves one element.
template <typename U, typename Id>
__global__ void embedding_forward_kernel(const Id* ids, std::int64_t id_stride, std::int64_t tokens,
                                         std::int64_t vocab_start, const U* table,
                                         std::int64_t rows, std::int64_t table_stride,
                                         std::int64_t hidden, U* out, std::int64_t out_stride) {
  for (std::int64_t k = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; k < tokens * hidden;
       k += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = k / hidden, j = k % hidden;
    const std::int64_t row = shard_row(ids, id_stride, t, vocab_start, rows);
    out[t * out_stride + j] = row < rows ? table[row * table_stride + j] : U(0);
  }
}

template <typename Id>
__global__ void sort_keys_kernel(const Id* ids, std::int64_t id_stride, std::int64_t tokens,
                                 std::int64_t vocab_start, std::int64_t rows, std::int64_t* keys,
                                 std::int64_t* token_index) {
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < tokens;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    keys[t] = shard_row(ids, id_stride, t, vocab_start, rows);
    token_index[t] = t;
  }
}

// Block p owns the run of equal sorted keys starting at p (other blocks return at once) and adds
// those tokens' gradient rows into the table row in token order.
template <typename T>
__global__ void scatter_add_kernel(const std::int64_t* sorted_rows,
                                   const std::int64_t* sorted_tokens, std::int64_t tokens,
                                   std::int64_t rows, const T* dout, std::int64_t dout_stride,
                                   std::int64_t hidden, T* dtable, std::int64_t table_stride) {
  const std::int64_t p = blockIdx.x;
  const std::int64_t row = sorted_rows[p];
  if (row >= rows || (p > 0 && sorted_rows[p - 1] == row)) return;
  T* dst = dtable + row * table_stride;
  for (std::int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    T sum = dst[j];
    for (std::int64_t q = p; q < tokens && sorted_rows[q] == row; ++q) {
      sum += dout[sorted_tokens[q] * dout_stride + j];
    }
    dst[j] = sum;
  }
}

template <std::size_t Bytes>
struct Bits;
template <>
struct Bits<2> {
  using type = std::uint16_t;
};
template <>
struct Bits<4> {
  using type = std::uint32_t;
};
template <>
struct Bits<8> {
  using type = std::uint64_t;
};

template <typename Fn>
void dispatch_ids(DType dtype, Fn&& fn) {
  if (dtype == DType::i32) {
    fn.template operator()<std::int32_t>();
  } else {
    fn.template operator()<std::int64_t>();
  }
}

void check_ids(const char* op, const Tensor& ids, Device device) {
  ops::check_device(op, "ids", ids, device);
  ops::check_rank(op, "ids", ids, 1);
  ops::check_dtype(op, "ids", ids, {DType::i32, DType::i64});
}

// Bits needed to sort keys 0..rows (the out-of-shard key included).
int key_bits(std::int64_t rows) {
  int bits = 1;
  while (bits < 63 && (std::int64_t{1} << bits) <= rows)
    ++bits;
  return bits;
}

}  // namespace

void CudaBackend::embedding_forward(const Tensor& ids, const Tensor& table,
                                    std::int64_t vocab_start, Tensor& out) {
  constexpr const char* op = "embedding_forward";
  const Device here = device();
  check_ids(op, ids, here);
  ops::check_device(op, "table", table, here);
  ops::check_device(op, "out", out, here);
  ops::check_rank(op, "table", table, 2);
  // A lookup only copies rows, so every float dtype works (bf16/f16 model weights included).
  ops::check_dtype(op, "table", table, {DType::f32, DType::f64, DType::bf16, DType::f16});
  ops::check_shape(op, "out", out, {ids.size(0), table.size(1)});
  ops::check_same_dtype(op, "out", out, "table", table);
  ops::check_last_dim_contiguous(op, "table", table);
  ops::check_last_dim_contiguous(op, "out", out);
  const std::int64_t tokens = ids.size(0), hidden = table.size(1);
  if (tokens * hidden == 0) return;
  DeviceGuard guard(ordinal_);
  auto launch = [&]<typename U>() {
    dispatch_ids(ids.dtype(), [&]<typename Id>() {
      embedding_forward_kernel<U, Id><<<grid_for(tokens * hidden), kThreads, 0, stream_>>>(
          static_cast<const Id*>(ids.raw_data()), ids.stride(0), tokens, vocab_start,
          static_cast<const U*>(table.raw_data()), table.size(0), table.stride(0), hidden,
          static_cast<U*>(out.raw_data()), out.stride(0));
    });
  };
  switch (table.element_size()) {
    case 2:
      launch.template operator()<Bits<2>::type>();
      break;
    case 4:
      launch.template operator()<Bits<4>::type>();
      break;
    default:
      launch.template operator()<Bits<8>::type>();
      break;
  }
  check_launch(op);
}

void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& dout,
                                     std::int64_t vocab_start, Tensor& dtable, bool accumulate) {
  constexpr const char* op = "embedding_backward";
  const Device here = device();
  check_ids(op, ids, here);
  ops::check_device(op, "dout", dout, here);
  ops::check_device(op, "dtable", dtable, here);
  ops::check_rank(op, "dtable", dtable, 2);
  ops::check_shape(op, "dout", dout, {ids.size(0), dtable.size(1)});
  ops::check_same_dtype(op, "dout", dout, "dtable", dtable);
  ops::check_last_dim_contiguous(op, "dout", dout);
  ops::check_last_dim_contiguous(op, "dtable", dtable);
  dispatch_float(op, dtable.dtype(), [&]<typename T>() {
    if (dtable.numel() == 0) return;
    if (!accumulate) fill(dtable, 0.0);
    const std::int64_t tokens = ids.size(0), rows = dtable.size(0), hidden = dtable.size(1);
    if (tokens == 0) return;
    if (tokens > std::numeric_limits<int>::max()) {
      ops::fail(op, "more than 2^31 - 1 tokens: " + ids.describe());
    }
    DeviceGuard guard(ordinal_);
    // keys, token indices, and their sorted copies.
    Tensor scratch = Tensor::empty({4, tokens}, DType::i64, here);
    auto* keys = static_cast<std::int64_t*>(scratch.raw_data());
    std::int64_t* token_index = keys + tokens;
    std::int64_t* sorted_keys = keys + 2 * tokens;
    std::int64_t* sorted_tokens = keys + 3 * tokens;
    dispatch_ids(ids.dtype(), [&]<typename Id>() {
      sort_keys_kernel<Id><<<grid_for(tokens), kThreads, 0, stream_>>>(
          static_cast<const Id*>(ids.raw_data()), ids.stride(0), tokens, vocab_start, rows, keys,
          token_index);
    });
    check_launch(op);
    // Radix sort is stable: equal rows keep increasing token order.
    const int n = static_cast<int>(tokens), bits = key_bits(rows);
    std::size_t temp_bytes = 0;
    MEGATRON_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, temp_bytes, keys, sorted_keys, token_index, sorted_tokens, n, 0, bits, stream_));
    Tensor temp = Tensor::empty({static_cast<std::int64_t>(temp_bytes)}, DType::u8, here);
    MEGATRON_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, keys,
                                                        sorted_keys, token_index, sorted_tokens, n,
                                                        0, bits, stream_));
    scatter_add_kernel<T><<<static_cast<unsigned>(tokens), row_threads(hidden), 0, stream_>>>(
        sorted_keys, sorted_tokens, tokens, rows, static_cast<const T*>(dout.raw_data()),
        dout.stride(0), hidden, static_cast<T*>(dtable.raw_data()), dtable.stride(0));
    check_launch(op);
  });
}

}  // namespace megatron::cuda
