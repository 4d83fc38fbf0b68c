// CPU softmax cross-entropy over a vocabulary shard, in the four steps a vocabulary-parallel loss
// combines across shards (row max, exp sums and target logit, loss, gradient).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/rows.h"
#include "backend/optimizer_math.h"

// The row loops below are built for AVX-512 and AVX2 as well as baseline x86-64
// (MEGATRON_CPU_CLONES): the vocabulary-wide passes are a sixth of a small GPT's step. This file
// is compiled with -ffp-contract=off (core/CMakeLists.txt) so that no clone fuses a multiply and
// an add: every clone gives the baseline's bits, and the losses do not depend on the CPU's ISA.

namespace megatron::cpu {

namespace {

// Per-row tensors (row_max, targets, ...) have the shape of the logits without the vocabulary
// dimension.
Shape rows_shape(const Tensor& logits) {
  return Shape(logits.shape().begin(), logits.shape().end() - 1);
}

// f64 logits keep f64 statistics; every narrower dtype accumulates in f32.
DType stats_dtype(const Tensor& logits) {
  return logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
}

// Storage offsets (from the first element) of every element of `t`, in logical order.
std::vector<std::int64_t> element_offsets(const Tensor& t) {
  if (t.dim() == 0) return {0};
  const auto rows = row_offsets(t);
  const std::int64_t n = t.size(-1), stride = t.stride(-1);
  std::vector<std::int64_t> offsets;
  offsets.reserve(rows.size() * static_cast<std::size_t>(n));
  for (std::int64_t row : rows) {
    for (std::int64_t j = 0; j < n; ++j)
      offsets.push_back(row + j * stride);
  }
  return offsets;
}

// A per-row tensor of any strides, read and written by logical row index.
template <typename T>
struct RowValues {
  explicit RowValues(const Tensor& t) : base(t.data<T>()), offsets(element_offsets(t)) {}
  T& operator[](std::int64_t r) const { return base[offsets[static_cast<std::size_t>(r)]]; }
  T* base;
  std::vector<std::int64_t> offsets;
};

// Each row's vocabulary-local target index, or -1 when the target belongs to another shard.
std::vector<std::int64_t> local_targets(const Tensor& targets, std::int64_t vocab_start,
                                        std::int64_t vocab) {
  std::vector<std::int64_t> local(static_cast<std::size_t>(targets.numel()));
  const auto read = [&]<typename Id>() {
    const RowValues<Id> values(targets);
    for (std::size_t r = 0; r < local.size(); ++r) {
      const std::int64_t t =
          static_cast<std::int64_t>(values[static_cast<std::int64_t>(r)]) - vocab_start;
      local[r] = t >= 0 && t < vocab ? t : -1;
    }
  };
  if (targets.dtype() == DType::i32) {
    read.template operator()<std::int32_t>();
  } else {
    read.template operator()<std::int64_t>();
  }
  return local;
}

// Calls fn.template operator()<Logit, Acc>() for the logits' storage and accumulation types.
template <typename Fn>
void dispatch_logits(const char* op, const Tensor& logits, Fn&& fn) {
  switch (logits.dtype()) {
    case DType::f32:
      fn.template operator()<float, float>();
      return;
    case DType::f64:
      fn.template operator()<double, double>();
      return;
    case DType::bf16:
      fn.template operator()<bf16, float>();
      return;
    case DType::f16:
      fn.template operator()<f16, float>();
      return;
    default:
      ops::fail(op,
                "logits must be float32, float64, bfloat16 or float16, got " + logits.describe());
  }
}

void check_logits(const char* op, const char* name, const Tensor& logits) {
  ops::check_device(op, name, logits, Device::cpu());
  if (logits.dim() < 1) ops::fail(op, std::string(name) + " must have a vocabulary dimension");
  ops::check_last_dim_contiguous(op, name, logits);
}

void check_row_stat(const char* op, const char* name, const Tensor& t, const Tensor& logits) {
  ops::check_device(op, name, t, Device::cpu());
  ops::check_shape(op, name, t, rows_shape(logits));
  if (t.dtype() != stats_dtype(logits)) {
    ops::fail(op, std::string(name) + " must be " + std::string(dtype_name(stats_dtype(logits))) +
                      " for " + logits.describe() + " logits, got " + t.describe());
  }
}

void check_targets(const char* op, const Tensor& targets, const Tensor& logits) {
  ops::check_device(op, "targets", targets, Device::cpu());
  ops::check_shape(op, "targets", targets, rows_shape(logits));
  ops::check_dtype(op, "targets", targets, {DType::i32, DType::i64});
}

// Eight interleaved running maxima, so the compiler can use vector max instructions.
template <typename Logit, typename Acc>
MEGATRON_CPU_CLONES Acc max_row(const Logit* x, std::int64_t n) {
  constexpr std::int64_t kLanes = 8;
  Acc lanes[kLanes];
  for (Acc& lane : lanes)
    lane = -INFINITY;
  const auto take = [](Acc& m, Acc v) { m = v > m ? v : m; };
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t k = 0; k < kLanes; ++k)
      take(lanes[k], static_cast<Acc>(x[j + k]));
  }
  for (std::int64_t k = 0; j + k < n; ++k)
    take(lanes[k], static_cast<Acc>(x[j + k]));
  for (std::int64_t k = 1; k < kLanes; ++k)
    take(lanes[0], lanes[k]);
  return lanes[0];
}

// Sum of exp(x - max) with eight interleaved partial sums combined in a fixed order: the same bits
// whatever the row's alignment, and a shorter dependency chain than one running sum.
template <typename Logit, typename Acc>
MEGATRON_CPU_CLONES Acc sum_exp_row(const Logit* x, std::int64_t n, Acc row_max) {
  constexpr std::int64_t kLanes = 8;
  Acc lanes[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t k = 0; k < kLanes; ++k) {
      lanes[k] += ops::softmax_exp(static_cast<Acc>(x[j + k]) - row_max);
    }
  }
  for (std::int64_t k = 0; j + k < n; ++k)
    lanes[k] += ops::softmax_exp(static_cast<Acc>(x[j + k]) - row_max);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// One row's gradient, (softmax - onehot(t)) * g; t < 0 when the target is on another shard.
template <typename Logit, typename Acc>
MEGATRON_CPU_CLONES void cross_entropy_backward_row(const Logit* x, Logit* dx, std::int64_t n,
                                                    std::int64_t t, Acc m, Acc inv_sum, Acc g) {
  // Read before the row is overwritten: dlogits may alias logits.
  const Acc target_x = t >= 0 ? static_cast<Acc>(x[t]) : Acc(0);
  // No loop-carried dependence even in place: element j is read, then written.
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j)
    dx[j] =
        static_cast<Logit>(ops::cross_entropy_grad(static_cast<Acc>(x[j]), m, inv_sum, false, g));
  if (t >= 0) dx[t] = static_cast<Logit>(ops::cross_entropy_grad(target_x, m, inv_sum, true, g));
}

}  // namespace

void CpuBackend::cross_entropy_max(const Tensor& logits, Tensor& row_max) {
  constexpr const char* op = "cross_entropy_max";
  check_logits(op, "logits", logits);
  check_row_stat(op, "row_max", row_max, logits);
  dispatch_logits(op, logits, [&]<typename Logit, typename Acc>() {
    if (row_max.numel() == 0) return;
    const auto rows = row_offsets(logits);
    const Logit* base = logits.data<Logit>();
    const std::int64_t vocab = logits.size(-1), n_rows = row_max.numel();
    const RowValues<Acc> out(row_max);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < n_rows; ++r) {
      const Logit* x = base + rows[static_cast<std::size_t>(r)];
      out[r] = max_row<Logit, Acc>(x, vocab);
    }
  });
}

void CpuBackend::cross_entropy_sums(const Tensor& logits, const Tensor& targets,
                                    std::int64_t vocab_start, const Tensor& row_max,
                                    Tensor& sum_exp, Tensor& target_logit) {
  constexpr const char* op = "cross_entropy_sums";
  check_logits(op, "logits", logits);
  check_targets(op, targets, logits);
  check_row_stat(op, "row_max", row_max, logits);
  check_row_stat(op, "sum_exp", sum_exp, logits);
  check_row_stat(op, "target_logit", target_logit, logits);
  dispatch_logits(op, logits, [&]<typename Logit, typename Acc>() {
    if (row_max.numel() == 0) return;
    const std::int64_t vocab = logits.size(-1), n_rows = row_max.numel();
    const auto rows = row_offsets(logits);
    const auto target = local_targets(targets, vocab_start, vocab);
    const Logit* base = logits.data<Logit>();
    const RowValues<Acc> max_of(row_max), sum_of(sum_exp), target_of(target_logit);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < n_rows; ++r) {
      const Logit* x = base + rows[static_cast<std::size_t>(r)];
      const std::int64_t t = target[static_cast<std::size_t>(r)];
      sum_of[r] = sum_exp_row<Logit, Acc>(x, vocab, max_of[r]);
      target_of[r] = t >= 0 ? static_cast<Acc>(x[t]) : Acc(0);
    }
  });
}

void CpuBackend::cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp,
                                    const Tensor& target_logit, Tensor& loss) {
  constexpr const char* op = "cross_entropy_loss";
  ops::check_device(op, "row_max", row_max, Device::cpu());
  ops::check_device(op, "sum_exp", sum_exp, Device::cpu());
  ops::check_device(op, "target_logit", target_logit, Device::cpu());
  ops::check_device(op, "loss", loss, Device::cpu());
  ops::check_same_shape(op, "sum_exp", sum_exp, "row_max", row_max);
  ops::check_same_shape(op, "target_logit", target_logit, "row_max", row_max);
  ops::check_same_shape(op, "loss", loss, "row_max", row_max);
  ops::check_same_dtype(op, "sum_exp", sum_exp, "row_max", row_max);
  ops::check_same_dtype(op, "target_logit", target_logit, "row_max", row_max);
  ops::check_same_dtype(op, "loss", loss, "row_max", row_max);
  dispatch_float(op, row_max.dtype(), [&]<typename T>() {
    if (loss.numel() == 0) return;
    const RowValues<T> max_of(row_max), sum_of(sum_exp), target_of(target_logit), out(loss);
    const std::int64_t n_rows = loss.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < n_rows; ++r) {
      // Megatron's order: log(sum) - (target - max); the difference of two nearby logits is exact.
      out[r] = std::log(sum_of[r]) - (target_of[r] - max_of[r]);
    }
  });
}

void CpuBackend::cross_entropy_argmax(const Tensor& logits, const Tensor& row_max,
                                      std::int64_t vocab_start, Tensor& argmax) {
  constexpr const char* op = "cross_entropy_argmax";
  check_logits(op, "logits", logits);
  check_row_stat(op, "row_max", row_max, logits);
  ops::check_device(op, "argmax", argmax, Device::cpu());
  ops::check_shape(op, "argmax", argmax, rows_shape(logits));
  ops::check_dtype(op, "argmax", argmax, {DType::i64});
  dispatch_logits(op, logits, [&]<typename Logit, typename Acc>() {
    if (row_max.numel() == 0) return;
    const auto rows = row_offsets(logits);
    const Logit* base = logits.data<Logit>();
    const std::int64_t vocab = logits.size(-1), n_rows = row_max.numel();
    const RowValues<Acc> max_of(row_max);
    const RowValues<std::int64_t> out(argmax);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < n_rows; ++r) {
      const Logit* x = base + rows[static_cast<std::size_t>(r)];
      const Acc m = max_of[r];
      std::int64_t found = std::numeric_limits<std::int64_t>::max();
      for (std::int64_t j = 0; j < vocab; ++j) {
        if (static_cast<Acc>(x[j]) == m) {
          found = vocab_start + j;
          break;
        }
      }
      out[r] = found;
    }
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                        std::int64_t vocab_start, const Tensor& row_max,
                                        const Tensor& sum_exp, const Tensor& dloss,
                                        Tensor& dlogits) {
  constexpr const char* op = "cross_entropy_backward";
  check_logits(op, "logits", logits);
  check_targets(op, targets, logits);
  check_row_stat(op, "row_max", row_max, logits);
  check_row_stat(op, "sum_exp", sum_exp, logits);
  check_row_stat(op, "dloss", dloss, logits);
  check_logits(op, "dlogits", dlogits);
  ops::check_same_shape(op, "dlogits", dlogits, "logits", logits);
  ops::check_same_dtype(op, "dlogits", dlogits, "logits", logits);
  dispatch_logits(op, logits, [&]<typename Logit, typename Acc>() {
    if (row_max.numel() == 0) return;
    const std::int64_t vocab = logits.size(-1), n_rows = row_max.numel();
    const auto in_rows = row_offsets(logits);
    const auto out_rows = row_offsets(dlogits);
    const auto target = local_targets(targets, vocab_start, vocab);
    const Logit* in_base = logits.data<Logit>();
    Logit* out_base = dlogits.data<Logit>();
    const RowValues<Acc> max_of(row_max), sum_of(sum_exp), dloss_of(dloss);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < n_rows; ++r) {
      const Logit* x = in_base + in_rows[static_cast<std::size_t>(r)];
      Logit* dx = out_base + out_rows[static_cast<std::size_t>(r)];
      cross_entropy_backward_row<Logit, Acc>(x, dx, vocab, target[static_cast<std::size_t>(r)],
                                             max_of[r], Acc(1) / sum_of[r], dloss_of[r]);
    }
  });
}

}  // namespace megatron::cpu
