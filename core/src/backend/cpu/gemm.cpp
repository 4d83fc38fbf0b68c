// CpuBackend::gemm: argument checks, then f32 through OpenBLAS or oneDNN (rule in gemm_policy.h),
// f64 through OpenBLAS, bf16/f16 through oneDNN (widened to f32 where oneDNN has no fast kernel).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/blas_capabilities.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_onednn.h"
#include "backend/cpu/gemm_policy.h"
#include "backend/cpu/gemm_problem.h"
#include "backend/op_checks.h"

namespace megatron::cpu {

namespace {

constexpr const char* kOp = "gemm";

std::string describe_op(const char* name, const Tensor& t, bool trans) {
  return std::string(trans ? "op(" : "") + name + (trans ? ")" : "") + " = " + name + " " +
         t.describe() + (trans ? " transposed" : "");
}

// Row stride of the matrix in the last two dims; rows may not overlap (BLAS needs ld >= cols).
std::int64_t row_stride(const char* name, const Tensor& t) {
  const std::int64_t rows = t.size(-2), cols = t.size(-1);
  if (rows <= 1) return std::max<std::int64_t>(cols, 1);
  const std::int64_t ld = t.stride(-2);
  if (ld < std::max<std::int64_t>(cols, 1)) {
    ops::fail(kOp, std::string(name) + " " + t.describe() + " has row stride " +
                       std::to_string(ld) + ", less than its row length " + std::to_string(cols) +
                       " (rows must not overlap)");
  }
  return ld;
}

GemmOperand describe_operand(const char* name, const Tensor& t, bool trans) {
  GemmOperand x;
  x.data = t.raw_data();
  x.trans = trans;
  x.ld = row_stride(name, t);
  x.batch = t.dim() == 3 ? t.size(0) : 1;
  x.batch_stride = x.batch > 1 ? t.stride(0) : t.size(-2) * x.ld;
  return x;
}

// Validates the arguments against backend.h's contract and reduces them to a GemmProblem.
GemmProblem make_problem(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c) {
  ops::check_device(kOp, "a", a, Device::cpu());
  ops::check_device(kOp, "b", b, Device::cpu());
  ops::check_device(kOp, "c", c, Device::cpu());
  ops::check_dtype(kOp, "a", a, {DType::f32, DType::f64, DType::bf16, DType::f16});
  ops::check_same_dtype(kOp, "b", b, "a", a);
  const DType out_dtype = a.dtype() == DType::f64 ? DType::f64 : DType::f32;
  if (c.dtype() != out_dtype) {
    ops::fail(kOp, "c must be " + std::string(dtype_name(out_dtype)) + " for " +
                       std::string(dtype_name(a.dtype())) + " inputs, got " + c.describe());
  }
  if (a.dim() != 2 && a.dim() != 3) {
    ops::fail(kOp, "a must be 2-D (M, K) or 3-D (batch, M, K), got " + a.describe());
  }
  ops::check_rank(kOp, "b", b, a.dim());
  ops::check_rank(kOp, "c", c, a.dim());
  ops::check_last_dim_contiguous(kOp, "a", a);
  ops::check_last_dim_contiguous(kOp, "b", b);
  ops::check_last_dim_contiguous(kOp, "c", c);

  GemmProblem p;
  p.input_dtype = a.dtype();
  p.m = trans_a ? a.size(-1) : a.size(-2);
  p.k = trans_a ? a.size(-2) : a.size(-1);
  const std::int64_t k_of_b = trans_b ? b.size(-1) : b.size(-2);
  p.n = trans_b ? b.size(-2) : b.size(-1);
  if (p.k != k_of_b) {
    ops::fail(kOp, "inner dimensions (K) differ: " + describe_op("a", a, trans_a) +
                       " has K = " + std::to_string(p.k) + ", " + describe_op("b", b, trans_b) +
                       " has K = " + std::to_string(k_of_b));
  }
  Shape expected{p.m, p.n};
  if (a.dim() == 3) {
    const std::int64_t batch_a = a.size(0), batch_b = b.size(0);
    if (batch_a != batch_b && batch_a != 1 && batch_b != 1) {
      ops::fail(kOp, "batch sizes differ: a " + a.describe() + " has " + std::to_string(batch_a) +
                         ", b " + b.describe() + " has " + std::to_string(batch_b) +
                         " (one of them may be 1 to broadcast)");
    }
    p.batch = std::max(batch_a, batch_b);
    expected.insert(expected.begin(), p.batch);
  }
  ops::check_shape(kOp, "c", c, expected);

  p.a = describe_operand("a", a, trans_a);
  p.b = describe_operand("b", b, trans_b);
  p.c = c.raw_data();
  p.ldc = row_stride("c", c);
  p.c_batch_stride = p.batch > 1 ? c.stride(0) : p.m * p.ldc;
  return p;
}

// A batch of row-major products over a broadcast b whose a and c batches are stacked rows is one
// taller GEMM: (batch * M, K) @ (K, N), which both libraries run faster than a batch loop.
void fold_batch_into_rows(GemmProblem& p) {
  if (p.batch == 1 || p.b.batch != 1 || p.a.trans) return;
  if (p.a.batch_stride != p.m * p.a.ld || p.c_batch_stride != p.m * p.ldc) return;
  p.m *= p.batch;
  p.batch = 1;
  p.a.batch = 1;
  p.a.batch_stride = p.m * p.a.ld;
  p.c_batch_stride = p.m * p.ldc;
}

bool fits_blas_int(const GemmProblem& p) {
  for (std::int64_t v : {p.m, p.n, p.k, p.a.ld, p.b.ld, p.ldc}) {
    if (v > INT_MAX) return false;
  }
  return true;
}

// OpenBLAS: one call per batch entry, each threaded by OpenBLAS over M and N.
template <typename T>
void blas_gemm(const GemmProblem& p, T alpha, T beta) {
  const auto trans = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int lda = static_cast<int>(p.a.ld), ldb = static_cast<int>(p.b.ld);
  const int ldc = static_cast<int>(p.ldc);
  for (std::int64_t i = 0; i < p.batch; ++i) {
    const T* a = static_cast<const T*>(p.a.data) + (p.a.batch == 1 ? 0 : i * p.a.batch_stride);
    const T* b = static_cast<const T*>(p.b.data) + (p.b.batch == 1 ? 0 : i * p.b.batch_stride);
    T* c = static_cast<T*>(p.c) + i * p.c_batch_stride;
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, trans(p.a.trans), trans(p.b.trans), m, n, k, alpha, a, lda, b, ldb,
                  beta, c, ldc);
    } else {
      cblas_dgemm(CblasRowMajor, trans(p.a.trans), trans(p.b.trans), m, n, k, alpha, a, lda, b, ldb,
                  beta, c, ldc);
    }
  }
}

// c = beta * c, for K = 0 or alpha = 0 (as BLAS: beta = 0 writes zeros without reading c).
template <typename T>
void scale_output(const GemmProblem& p, T beta) {
  const std::int64_t rows = p.batch * p.m;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = static_cast<T*>(p.c) + (r / p.m) * p.c_batch_stride + (r % p.m) * p.ldc;
    for (std::int64_t j = 0; j < p.n; ++j)
      row[j] = beta == T(0) ? T(0) : beta * row[j];
  }
}

// -1: follow f32_library(); otherwise a forced GemmLibrary.
std::atomic<int> forced_f32_library{-1};

bool f32_uses_onednn(const GemmProblem& p) {
  const int forced = forced_f32_library.load(std::memory_order_relaxed);
  const GemmLibrary library =
      forced < 0 ? f32_library(p, openblas_kernels_generic()) : static_cast<GemmLibrary>(forced);
  return !fits_blas_int(p) || library == GemmLibrary::onednn;
}

void f32_gemm(const GemmProblem& p, float alpha, float beta) {
  if (f32_uses_onednn(p) && onednn_matmul(p, alpha, beta)) return;
  if (!fits_blas_int(p)) ops::fail(kOp, "dimensions and strides must be below 2^31 for OpenBLAS");
  blas_gemm<float>(p, alpha, beta);
}

// (rows, cols) of operand a or b as stored: op(a) is (M, K) and op(b) is (K, N).
std::pair<std::int64_t, std::int64_t> stored_shape(const GemmProblem& p, bool is_a) {
  const GemmOperand& x = is_a ? p.a : p.b;
  const std::int64_t rows = is_a ? p.m : p.k, cols = is_a ? p.k : p.n;
  return x.trans ? std::pair{cols, rows} : std::pair{rows, cols};
}

// The layout of `x` once widen() has copied it to contiguous f32.
void set_widened_layout(GemmOperand& x, std::int64_t rows, std::int64_t cols) {
  x.ld = std::max<std::int64_t>(cols, 1);
  x.batch_stride = rows * cols;
}

// The stored matrices of operand a or b as contiguous f32 (exact for bf16 and f16 inputs).
template <typename Half>
std::vector<float> widen(GemmProblem& p, bool is_a) {
  GemmOperand& x = is_a ? p.a : p.b;
  const auto [rows, cols] = stored_shape(p, is_a);
  std::vector<float> out(static_cast<std::size_t>(x.batch * rows * cols));
  const auto* src = static_cast<const Half*>(x.data);
  const std::int64_t total_rows = x.batch * rows, batch_stride = x.batch_stride, ld = x.ld;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < total_rows; ++r) {
    const Half* in = src + (r / rows) * batch_stride + (r % rows) * ld;
    float* dst = out.data() + r * cols;
    for (std::int64_t j = 0; j < cols; ++j)
      dst[j] = static_cast<float>(in[j]);
  }
  x.data = out.data();
  set_widened_layout(x, rows, cols);
  return out;
}

// bf16/f16 where oneDNN has no fast kernel: exact conversion to f32, then the f32 route.
template <typename Half>
void widened_gemm(GemmProblem p, float alpha, float beta) {
  const auto a = widen<Half>(p, true);
  const auto b = widen<Half>(p, false);
  p.input_dtype = DType::f32;
  f32_gemm(p, alpha, beta);
}

std::string f32_route(const GemmProblem& p, float alpha, float beta) {
  if (f32_uses_onednn(p)) {
    const std::string impl = onednn_matmul_impl(p, alpha, beta);
    if (!impl.empty()) return "onednn " + impl;
  }
  return "openblas";
}

}  // namespace

void CpuBackend::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                      float alpha, float beta) {
  GemmProblem p = make_problem(a, trans_a, b, trans_b, c);
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  const bool f64 = p.input_dtype == DType::f64;
  if (p.k == 0 || alpha == 0.0f) {
    if (f64) {
      scale_output<double>(p, beta);
    } else {
      scale_output<float>(p, beta);
    }
    return;
  }
  fold_batch_into_rows(p);
  switch (p.input_dtype) {
    case DType::f64:
      if (!fits_blas_int(p)) ops::fail(kOp, "float64 dimensions and strides must be below 2^31");
      blas_gemm<double>(p, alpha, beta);
      return;
    case DType::f32:
      f32_gemm(p, alpha, beta);
      return;
    case DType::bf16:
      if (!onednn_matmul(p, alpha, beta)) widened_gemm<bf16>(p, alpha, beta);
      return;
    case DType::f16:
      if (!onednn_matmul(p, alpha, beta)) widened_gemm<f16>(p, alpha, beta);
      return;
    default:
      ops::fail(kOp, "unreachable dtype");
  }
}

void force_f32_library(std::optional<GemmLibrary> library) {
  forced_f32_library.store(library ? static_cast<int>(*library) : -1);
}

std::string gemm_route(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                       float alpha, float beta) {
  GemmProblem p = make_problem(a, trans_a, b, trans_b, c);
  if (p.batch == 0 || p.m == 0 || p.n == 0) return "none (empty output)";
  if (p.k == 0 || alpha == 0.0f) return "scale c by beta";
  fold_batch_into_rows(p);
  const std::string folded = p.batch == 1 && a.dim() == 3 && a.size(0) > 1 ? ", batch folded" : "";
  switch (p.input_dtype) {
    case DType::f64:
      return "openblas" + folded;
    case DType::f32:
      return f32_route(p, alpha, beta) + folded;
    default: {
      const std::string impl = onednn_matmul_impl(p, alpha, beta);
      if (!impl.empty()) return "onednn " + impl + folded;
      const auto [a_rows, a_cols] = stored_shape(p, true);
      const auto [b_rows, b_cols] = stored_shape(p, false);
      set_widened_layout(p.a, a_rows, a_cols);
      set_widened_layout(p.b, b_rows, b_cols);
      p.input_dtype = DType::f32;
      return "widened to f32, " + f32_route(p, alpha, beta) + folded;
    }
  }
}

}  // namespace megatron::cpu
