// CUDA softmax cross-entropy over a vocabulary shard, in the four steps a vocabulary-parallel loss
// combines across shards (row max, exp sums and target logit, loss, gradient): one block per row,
// fixed-order block reductions, optimizer_math.h's per-element gradient.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/optimizer_math.h"

namespace megatron::cuda {

namespace {

// Per-row values (row_max, targets, ...) addressed by logical row index.
template <typename T>
struct RowValues {
  T* base;
  Layout layout;
  __device__ T& operator[](std::int64_t r) const { return base[offset_at(layout, r)]; }
};

template <typename T>
RowValues<T> row_values(const char* op, const char* name, const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), layout_of(op, name, t)};
}

// The row's vocabulary-local target, or -1 when it belongs to another shard.
template <typename Id>
__device__ __forceinline__ std::int64_t local_target(RowValues<const Id> targets, std::int64_t r,
                                                     std::int64_t vocab_start, std::int64_t vocab) {
  const std::int64_t t = static_cast<std::int64_t>(targets[r]) - vocab_start;
  return t >= 0 && t < vocab ? t : -1;
}

template <typename Logit>
__global__ void row_max_kernel(Rows<const Logit> logits, std::int64_t vocab,
                               RowValues<acc_t<Logit>> row_max) {
  using Acc = acc_t<Logit>;
  __shared__ Acc scratch[32];
  const Logit* x = logits.row(blockIdx.x);
  Acc m = negative_infinity<Acc>();
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const Acc v = static_cast<Acc>(x[j]);
    m = v > m ? v : m;
  }
  m = block_max(m, scratch, negative_infinity<Acc>());
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename Logit, typename Id>
__global__ void sums_kernel(Rows<const Logit> logits, std::int64_t vocab,
                            RowValues<const Id> targets, std::int64_t vocab_start,
                            RowValues<const acc_t<Logit>> row_max, RowValues<acc_t<Logit>> sum_exp,
                            RowValues<acc_t<Logit>> target_logit) {
  using Acc = acc_t<Logit>;
  __shared__ Acc scratch[32];
  const std::int64_t r = blockIdx.x;
  const Logit* x = logits.row(r);
  const Acc m = row_max[r];
  Acc sum = Acc(0);
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    sum += ops::softmax_exp(static_cast<Acc>(x[j]) - m);  // the CPU backend's exp, same bits
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    const std::int64_t t = local_target(targets, r, vocab_start, vocab);
    sum_exp[r] = sum;
    target_logit[r] = t >= 0 ? static_cast<Acc>(x[t]) : Acc(0);
  }
}

template <typename T>
__global__ void loss_kernel(RowValues<const T> row_max, RowValues<const T> sum_exp,
                            RowValues<const T> target_logit, RowValues<T> loss, std::int64_t n) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < n;
       r += std::int64_t(gridDim.x) * blockDim.x) {
    // Megatron's order: log(sum) - (target - max); the difference of two nearby logits is exact.
    loss[r] = std::log(sum_exp[r]) - (target_logit[r] - row_max[r]);
  }
}

// The first index of the row holding the global max: each thread's first hit, then the block's
// smallest (a max of negated indices, since the block reductions only provide max).
template <typename Logit>
__global__ void argmax_kernel(Rows<const Logit> logits, std::int64_t vocab,
                              RowValues<const acc_t<Logit>> row_max, std::int64_t vocab_start,
                              RowValues<std::int64_t> argmax) {
  using Acc = acc_t<Logit>;
  constexpr long long kNone = 0x7fffffffffffffffLL;
  __shared__ long long scratch[32];
  const std::int64_t r = blockIdx.x;
  const Logit* x = logits.row(r);
  const Acc m = row_max[r];
  long long first = kNone;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    if (static_cast<Acc>(x[j]) == m) {
      first = j;
      break;
    }
  }
  const long long best = -block_max(-first, scratch, -kNone);
  if (threadIdx.x == 0) argmax[r] = best == kNone ? kNone : vocab_start + best;
}

// Each element is read and written by the same thread, so dlogits may alias logits.
template <typename Logit, typename Id>
__global__ void backward_kernel(Rows<const Logit> logits, std::int64_t vocab,
                                RowValues<const Id> targets, std::int64_t vocab_start,
                                RowValues<const acc_t<Logit>> row_max,
                                RowValues<const acc_t<Logit>> sum_exp,
                                RowValues<const acc_t<Logit>> dloss, Rows<Logit> dlogits) {
  using Acc = acc_t<Logit>;
  const std::int64_t r = blockIdx.x;
  const Logit* x = logits.row(r);
  Logit* dx = dlogits.row(r);
  const std::int64_t t = local_target(targets, r, vocab_start, vocab);
  const Acc m = row_max[r], inv_sum = Acc(1) / sum_exp[r], g = dloss[r];
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    dx[j] =
        static_cast<Logit>(ops::cross_entropy_grad(static_cast<Acc>(x[j]), m, inv_sum, j == t, g));
  }
}

Shape rows_shape(const Tensor& logits) {
  return Shape(logits.shape().begin(), logits.shape().end() - 1);
}

DType stats_dtype(const Tensor& logits) {
  return logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
}

void check_logits(const char* op, const char* name, const Tensor& logits, Device device) {
  ops::check_device(op, name, logits, device);
  if (logits.dim() < 1) ops::fail(op, std::string(name) + " must have a vocabulary dimension");
  ops::check_last_dim_contiguous(op, name, logits);
}

void check_row_stat(const char* op, const char* name, const Tensor& t, const Tensor& logits,
                    Device device) {
  ops::check_device(op, name, t, device);
  ops::check_shape(op, name, t, rows_shape(logits));
  if (t.dtype() != stats_dtype(logits)) {
    ops::fail(op, std::string(name) + " must be " + std::string(dtype_name(stats_dtype(logits))) +
                      " for " + logits.describe() + " logits, got " + t.describe());
  }
}

void check_targets(const char* op, const Tensor& targets, const Tensor& logits, Device device) {
  ops::check_device(op, "targets", targets, device);
  ops::check_shape(op, "targets", targets, rows_shape(logits));
  ops::check_dtype(op, "targets", targets, {DType::i32, DType::i64});
}

template <typename Fn>
void dispatch_ids(DType dtype, Fn&& fn) {
  if (dtype == DType::i32) {
    fn.template operator()<std::int32_t>();
  } else {
    fn.template operator()<std::int64_t>();
  }
}

// Logits' rows (last dimension stride 1 or a single column).
template <typename Logit>
Rows<const Logit> logit_rows(const char* op, const Tensor& t) {
  return const_rows<Logit>(op, "logits", t);
}

}  // namespace

void CudaBackend::cross_entropy_max(const Tensor& logits, Tensor& row_max) {
  constexpr const char* op = "cross_entropy_max";
  const Device here = device();
  check_logits(op, "logits", logits, here);
  check_row_stat(op, "row_max", row_max, logits, here);
  const std::int64_t rows = row_max.numel(), vocab = logits.size(-1);
  if (rows == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_floating(op, logits.dtype(), [&]<typename Logit>() {
    row_max_kernel<Logit><<<static_cast<unsigned>(rows), row_threads(vocab), 0, stream_>>>(
        logit_rows<Logit>(op, logits), vocab, row_values<acc_t<Logit>>(op, "row_max", row_max));
    check_launch(op);
  });
}

void CudaBackend::cross_entropy_sums(const Tensor& logits, const Tensor& targets,
                                     std::int64_t vocab_start, const Tensor& row_max,
                                     Tensor& sum_exp, Tensor& target_logit) {
  constexpr const char* op = "cross_entropy_sums";
  const Device here = device();
  check_logits(op, "logits", logits, here);
  check_targets(op, targets, logits, here);
  check_row_stat(op, "row_max", row_max, logits, here);
  check_row_stat(op, "sum_exp", sum_exp, logits, here);
  check_row_stat(op, "target_logit", target_logit, logits, here);
  const std::int64_t rows = row_max.numel(), vocab = logits.size(-1);
  if (rows == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_floating(op, logits.dtype(), [&]<typename Logit>() {
    using Acc = acc_t<Logit>;
    dispatch_ids(targets.dtype(), [&]<typename Id>() {
      sums_kernel<Logit, Id><<<static_cast<unsigned>(rows), row_threads(vocab), 0, stream_>>>(
          logit_rows<Logit>(op, logits), vocab, row_values<const Id>(op, "targets", targets),
          vocab_start, row_values<const Acc>(op, "row_max", row_max),
          row_values<Acc>(op, "sum_exp", sum_exp),
          row_values<Acc>(op, "target_logit", target_logit));
    });
    check_launch(op);
  });
}

void CudaBackend::cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp,
                                     const Tensor& target_logit, Tensor& loss) {
  constexpr const char* op = "cross_entropy_loss";
  const Device here = device();
  ops::check_device(op, "row_max", row_max, here);
  ops::check_device(op, "sum_exp", sum_exp, here);
  ops::check_device(op, "target_logit", target_logit, here);
  ops::check_device(op, "loss", loss, here);
  ops::check_same_shape(op, "sum_exp", sum_exp, "row_max", row_max);
  ops::check_same_shape(op, "target_logit", target_logit, "row_max", row_max);
  ops::check_same_shape(op, "loss", loss, "row_max", row_max);
  ops::check_same_dtype(op, "sum_exp", sum_exp, "row_max", row_max);
  ops::check_same_dtype(op, "target_logit", target_logit, "row_max", row_max);
  ops::check_same_dtype(op, "loss", loss, "row_max", row_max);
  const std::int64_t n = loss.numel();
  DeviceGuard guard(ordinal_);
  dispatch_float(op, row_max.dtype(), [&]<typename T>() {
    if (n == 0) return;
    loss_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(
        row_values<const T>(op, "row_max", row_max), row_values<const T>(op, "sum_exp", sum_exp),
        row_values<const T>(op, "target_logit", target_logit), row_values<T>(op, "loss", loss), n);
    check_launch(op);
  });
}

void CudaBackend::cross_entropy_argmax(const Tensor& logits, const Tensor& row_max,
                                       std::int64_t vocab_start, Tensor& argmax) {
  constexpr const char* op = "cross_entropy_argmax";
  const Device here = device();
  check_logits(op, "logits", logits, here);
  check_row_stat(op, "row_max", row_max, logits, here);
  ops::check_device(op, "argmax", argmax, here);
  ops::check_same_shape(op, "argmax", argmax, "row_max", row_max);
  ops::check_dtype(op, "argmax", argmax, {DType::i64});
  const std::int64_t rows = row_max.numel(), vocab = logits.size(-1);
  if (rows == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_floating(op, logits.dtype(), [&]<typename Logit>() {
    using Acc = acc_t<Logit>;
    argmax_kernel<Logit><<<static_cast<unsigned>(rows), row_threads(vocab), 0, stream_>>>(
        logit_rows<Logit>(op, logits), vocab, row_values<const Acc>(op, "row_max", row_max),
        vocab_start, row_values<std::int64_t>(op, "argmax", argmax));
    check_launch(op);
  });
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                         std::int64_t vocab_start, const Tensor& row_max,
                                         const Tensor& sum_exp, const Tensor& dloss,
                                         Tensor& dlogits) {
  constexpr const char* op = "cross_entropy_backward";
  const Device here = device();
  check_logits(op, "logits", logits, here);
  check_targets(op, targets, logits, here);
  check_row_stat(op, "row_max", row_max, logits, here);
  check_row_stat(op, "sum_exp", sum_exp, logits, here);
  check_row_stat(op, "dloss", dloss, logits, here);
  check_logits(op, "dlogits", dlogits, here);
  ops::check_same_shape(op, "dlogits", dlogits, "logits", logits);
  ops::check_same_dtype(op, "dlogits", dlogits, "logits", logits);
  const std::int64_t rows = row_max.numel(), vocab = logits.size(-1);
  if (rows == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_floating(op, logits.dtype(), [&]<typename Logit>() {
    using Acc = acc_t<Logit>;
    dispatch_ids(targets.dtype(), [&]<typename Id>() {
      backward_kernel<Logit, Id><<<static_cast<unsigned>(rows), row_threads(vocab), 0, stream_>>>(
          logit_rows<Logit>(op, logits), vocab, row_values<const Id>(op, "targets", targets),
          vocab_start, row_values<const Acc>(op, "row_max", row_max),
          row_values<const Acc>(op, "sum_exp", sum_exp), row_values<const Acc>(op, "dloss", dloss),
          rows_view<Logit>(op, "dlogits", dlogits));
    });
    check_launch(op);
  });
}

}  // namespace megatron::cuda
