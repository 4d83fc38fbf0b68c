// CPU embedding lookup for a (vocabulary-parallel) shard of the table, and its deterministic
// scatter-add gradient.
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"

namespace megatron::cpu {

namespace {

constexpr std::int64_t kNotInShard = -1;

void check_ids(const char* op, const Tensor& ids) {
  ops::check_device(op, "ids", ids, Device::cpu());
  ops::check_rank(op, "ids", ids, 1);
  ops::check_dtype(op, "ids", ids, {DType::i32, DType::i64});
}

// The table row of every token, or kNotInShard for ids outside [vocab_start, vocab_start + rows).
template <typename Id>
std::vector<std::int64_t> shard_rows_of(const Tensor& ids, std::int64_t vocab_start,
                                        std::int64_t rows) {
  const Id* base = ids.data<Id>();
  const std::int64_t n = ids.size(0), stride = ids.stride(0);
  std::vector<std::int64_t> shard_rows(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t local = static_cast<std::int64_t>(base[i * stride]) - vocab_start;
    shard_rows[static_cast<std::size_t>(i)] = local >= 0 && local < rows ? local : kNotInShard;
  }
  return shard_rows;
}

std::vector<std::int64_t> shard_rows_of(const Tensor& ids, std::int64_t vocab_start,
                                        std::int64_t rows) {
  if (ids.numel() == 0) return {};
  return ids.dtype() == DType::i32 ? shard_rows_of<std::int32_t>(ids, vocab_start, rows)
                                   : shard_rows_of<std::int64_t>(ids, vocab_start, rows);
}

// Tokens grouped by table row (a stable counting sort): tokens of row v are
// order[begin[v] .. begin[v + 1]) in increasing token index, so each row's sum has a fixed order.
struct TokensByRow {
  std::vector<std::int64_t> begin;
  std::vector<std::int64_t> order;
  std::vector<std::int64_t> touched_rows;
};

TokensByRow group_by_row(const std::vector<std::int64_t>& shard_rows, std::int64_t rows) {
  TokensByRow g;
  g.begin.assign(static_cast<std::size_t>(rows + 1), 0);
  for (std::int64_t row : shard_rows) {
    if (row != kNotInShard) ++g.begin[static_cast<std::size_t>(row + 1)];
  }
  for (std::int64_t v = 0; v < rows; ++v) {
    const auto next = static_cast<std::size_t>(v + 1);
    if (g.begin[next] > 0) g.touched_rows.push_back(v);
    g.begin[next] += g.begin[next - 1];
  }
  g.order.resize(static_cast<std::size_t>(g.begin.back()));
  std::vector<std::int64_t> fill(g.begin.begin(), g.begin.end() - 1);
  for (std::size_t t = 0; t < shard_rows.size(); ++t) {
    if (shard_rows[t] != kNotInShard) {
      g.order[static_cast<std::size_t>(fill[static_cast<std::size_t>(shard_rows[t])]++)] =
          static_cast<std::int64_t>(t);
    }
  }
  return g;
}

template <typename T>
void scatter_add_rows(const Tensor& dout, const TokensByRow& groups, Tensor& dtable,
                      bool accumulate) {
  const std::int64_t hidden = dtable.size(1);
  const T* dout_base = dout.data<T>();
  T* table_base = dtable.data<T>();
  const std::int64_t dout_stride = dout.stride(0), table_stride = dtable.stride(0);
  if (!accumulate) {
    const std::int64_t rows = dtable.size(0);
#pragma omp parallel for schedule(static)
    for (std::int64_t v = 0; v < rows; ++v) {
      T* row = table_base + v * table_stride;
      for (std::int64_t j = 0; j < hidden; ++j)
        row[j] = T(0);
    }
  }
  const auto touched = static_cast<std::int64_t>(groups.touched_rows.size());
  // Rows are independent and each is summed by one thread in token order, so the schedule only
  // balances load; it cannot change any result bit.
#pragma omp parallel for schedule(dynamic, 16)
  for (std::int64_t k = 0; k < touched; ++k) {
    const std::int64_t v = groups.touched_rows[static_cast<std::size_t>(k)];
    T* row = table_base + v * table_stride;
    for (std::int64_t p = groups.begin[static_cast<std::size_t>(v)];
         p < groups.begin[static_cast<std::size_t>(v + 1)]; ++p) {
      const T* src = dout_base + groups.order[static_cast<std::size_t>(p)] * dout_stride;
#pragma omp simd
      for (std::int64_t j = 0; j < hidden; ++j)
        row[j] += src[j];
    }
  }
}

}  // namespace

void CpuBackend::embedding_forward(const Tensor& ids, const Tensor& table, std::int64_t vocab_start,
                                   Tensor& out) {
  constexpr const char* op = "embedding_forward";
  check_ids(op, ids);
  ops::check_device(op, "table", table, Device::cpu());
  ops::check_device(op, "out", out, Device::cpu());
  ops::check_rank(op, "table", table, 2);
  // A lookup only copies rows, so every float dtype works (bf16/f16 model weights included).
  ops::check_dtype(op, "table", table, {DType::f32, DType::f64, DType::bf16, DType::f16});
  ops::check_shape(op, "out", out, {ids.size(0), table.size(1)});
  ops::check_same_dtype(op, "out", out, "table", table);
  ops::check_last_dim_contiguous(op, "table", table);
  ops::check_last_dim_contiguous(op, "out", out);
  if (out.numel() == 0) return;

  const auto shard_rows = shard_rows_of(ids, vocab_start, table.size(0));
  const auto row_bytes = static_cast<std::size_t>(table.size(1)) * table.element_size();
  const auto* table_base = static_cast<const char*>(table.raw_data());
  auto* out_base = static_cast<char*>(out.raw_data());
  const auto table_stride = table.stride(0) * static_cast<std::int64_t>(table.element_size());
  const auto out_stride = out.stride(0) * static_cast<std::int64_t>(out.element_size());
  const auto tokens = static_cast<std::int64_t>(shard_rows.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t row = shard_rows[static_cast<std::size_t>(t)];
    char* dst = out_base + t * out_stride;
    // All-zero bytes are 0.0 in every float format.
    if (row == kNotInShard) {
      std::memset(dst, 0, row_bytes);
    } else {
      std::memcpy(dst, table_base + row * table_stride, row_bytes);
    }
  }
}

void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& dout, std::int64_t vocab_start,
                                    Tensor& dtable, bool accumulate) {
  constexpr const char* op = "embedding_backward";
  check_ids(op, ids);
  ops::check_device(op, "dout", dout, Device::cpu());
  ops::check_device(op, "dtable", dtable, Device::cpu());
  ops::check_rank(op, "dtable", dtable, 2);
  ops::check_shape(op, "dout", dout, {ids.size(0), dtable.size(1)});
  ops::check_same_dtype(op, "dout", dout, "dtable", dtable);
  ops::check_last_dim_contiguous(op, "dout", dout);
  ops::check_last_dim_contiguous(op, "dtable", dtable);
  dispatch_float(op, dtable.dtype(), [&]<typename T>() {
    if (dtable.numel() == 0) return;
    const auto groups =
        group_by_row(shard_rows_of(ids, vocab_start, dtable.size(0)), dtable.size(0));
    scatter_add_rows<T>(dout, groups, dtable, accumulate);
  });
}

}  // namespace megatron::cpu
