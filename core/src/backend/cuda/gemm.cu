// CUDA GEMM through cuBLASLt: row-major problems mapped onto cuBLAS's column-major convention,
// batched with strides (stride 0 broadcasts a batch of 1), one algorithm chosen per problem shape
// and then reused, so repeated calls give the same bits.
#include <cublasLt.h>

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::cuda {

namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("gemm: ") + what + ": " + cublasLtGetStatusName(status) + ": " +
              cublasLtGetStatusString(status));
}
#define MEGATRON_CUBLAS_CHECK(expr) check_cublas((expr), #expr)

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

// Largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by alignment.
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

// Everything the algorithm choice depends on.
using GemmKey = std::tuple<int, bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, std::uint32_t, std::uint32_t, std::uint32_t, bool>;

// RAII for the cuBLASLt descriptors of one call.
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  ~MatmulDesc() {
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};
struct MatrixLayout {
  cublasLtMatrixLayout_t layout = nullptr;
  ~MatrixLayout() {
    if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
};
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

// A column-major matrix of rows x cols with leading dimension ld, `batch` of them `batch_stride`
// elements apart.
void make_layout(MatrixLayout& out, cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                 std::int64_t ld, std::int32_t batch, std::int64_t batch_stride) {
  MEGATRON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &out.layout, type, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld));
  if (batch > 1) {
    MEGATRON_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        out.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    MEGATRON_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(out.layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                         &batch_stride, sizeof batch_stride));
  }
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f64:
      return CUDA_R_64F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      ops::fail("gemm", "unsupported dtype " + std::string(dtype_name(dtype)));
  }
}

// One operand as stored (row-major rows x cols with row stride ld, batch stride).
struct Operand {
  std::int64_t rows, cols, ld, batch, batch_stride;
};

// Batch size 1 broadcasts (batch stride 0).
Operand operand_of(const char* name, const Tensor& t) {
  const bool batched = t.dim() == 3;
  Operand o{t.size(-2), t.size(-1), t.stride(-2), batched ? t.size(0) : 1,
            batched && t.size(0) > 1 ? t.stride(0) : 0};
  // A single row's stride is meaningless; anything at least the width is valid for cuBLAS.
  if (o.rows <= 1) o.ld = std::max<std::int64_t>(o.cols, 1);
  if (o.ld < std::max<std::int64_t>(o.cols, 1)) {
    ops::fail("gemm", std::string(name) + " " + t.describe() + " has row stride " +
                          std::to_string(o.ld) + ", less than its row length " +
                          std::to_string(o.cols) + " (rows must not overlap)");
  }
  return o;
}

std::string describe_op(const char* name, const Tensor& t, bool trans) {
  return std::string(trans ? "op(" : "") + name + (trans ? ")" : "") + " = " + name + " " +
         t.describe() + (trans ? " transposed" : "");
}

}  // namespace

struct GemmState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<GemmKey, cublasLtMatmulAlgo_t> algorithms;
};

void GemmStateDeleter::operator()(GemmState* state) const {
  if (state->handle) cublasLtDestroy(state->handle);
  if (state->workspace) cudaFree(state->workspace);
  delete state;
}

void CudaBackend::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                       float alpha, float beta) {
  // The CPU backend's checks (cpu/gemm.cpp), in the same order and with the same messages.
  constexpr const char* op = "gemm";
  check_here(op, "a", a);
  check_here(op, "b", b);
  check_here(op, "c", c);
  ops::check_dtype(op, "a", a, {DType::f32, DType::f64, DType::bf16, DType::f16});
  ops::check_same_dtype(op, "b", b, "a", a);
  const DType out_dtype = a.dtype() == DType::f64 ? DType::f64 : DType::f32;
  if (c.dtype() != out_dtype) {
    ops::fail(op, "c must be " + std::string(dtype_name(out_dtype)) + " for " +
                      std::string(dtype_name(a.dtype())) + " inputs, got " + c.describe());
  }
  if (a.dim() != 2 && a.dim() != 3) {
    ops::fail(op, "a must be 2-D (M, K) or 3-D (batch, M, K), got " + a.describe());
  }
  ops::check_rank(op, "b", b, a.dim());
  ops::check_rank(op, "c", c, a.dim());
  ops::check_last_dim_contiguous(op, "a", a);
  ops::check_last_dim_contiguous(op, "b", b);
  ops::check_last_dim_contiguous(op, "c", c);
  const std::int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const std::int64_t k = trans_a ? a.size(-2) : a.size(-1);
  const std::int64_t k_of_b = trans_b ? b.size(-1) : b.size(-2);
  const std::int64_t n = trans_b ? b.size(-2) : b.size(-1);
  if (k != k_of_b) {
    ops::fail(op, "inner dimensions (K) differ: " + describe_op("a", a, trans_a) +
                      " has K = " + std::to_string(k) + ", " + describe_op("b", b, trans_b) +
                      " has K = " + std::to_string(k_of_b));
  }
  Shape expected{m, n};
  std::int64_t batch = 1;
  if (a.dim() == 3) {
    const std::int64_t batch_a = a.size(0), batch_b = b.size(0);
    if (batch_a != batch_b && batch_a != 1 && batch_b != 1) {
      ops::fail(op, "batch sizes differ: a " + a.describe() + " has " + std::to_string(batch_a) +
                        ", b " + b.describe() + " has " + std::to_string(batch_b) +
                        " (one of them may be 1 to broadcast)");
    }
    batch = std::max(batch_a, batch_b);
    expected.insert(expected.begin(), batch);
  }
  ops::check_shape(op, "c", c, expected);
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    // An empty sum: c = beta * c (beta 0 overwrites, even NaNs).
    if (beta == 0.0f) {
      fill(c, 0.0);
    } else {
      scale(c, beta);
    }
    return;
  }
  if (batch > std::numeric_limits<std::int32_t>::max()) ops::fail(op, "batch too large");

  const Operand oa = operand_of("a", a), ob = operand_of("b", b), oc = operand_of("c", c);
  const bool f64 = a.dtype() == DType::f64;
  const bool tf32 = allow_tf32_ && a.dtype() == DType::f32;

  DeviceGuard guard(ordinal_);
  if (!gemm_) {
    gemm_.reset(new GemmState);
    MEGATRON_CUBLAS_CHECK(cublasLtCreate(&gemm_->handle));
    MEGATRON_CUDA_CHECK(cudaMalloc(&gemm_->workspace, kWorkspaceBytes));
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS's first operand is
  // b's storage and its second is a's, each a column-major (cols x rows) matrix of its storage.
  const cudaDataType_t in_type = cuda_type(a.dtype()), out_type = cuda_type(c.dtype());
  const std::int32_t batch32 = static_cast<std::int32_t>(batch);
  MatrixLayout lb, la, lc;
  make_layout(lb, in_type, ob.cols, ob.rows, ob.ld, batch32, ob.batch_stride);
  make_layout(la, in_type, oa.cols, oa.rows, oa.ld, batch32, oa.batch_stride);
  make_layout(lc, out_type, oc.cols, oc.rows, oc.ld, batch32, oc.batch_stride);

  const cublasComputeType_t compute = f64    ? CUBLAS_COMPUTE_64F
                                      : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                             : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;
  MatmulDesc desc;
  MEGATRON_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.desc, compute, scale_type));
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  MEGATRON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &op_first, sizeof op_first));
  MEGATRON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                       &op_second, sizeof op_second));

  const std::uint32_t align_a = alignment_of(a.raw_data()), align_b = alignment_of(b.raw_data()),
                      align_c = alignment_of(c.raw_data());
  const GemmKey key{static_cast<int>(a.dtype()),
                    trans_a,
                    trans_b,
                    m,
                    n,
                    k,
                    batch,
                    oa.ld,
                    ob.ld,
                    oc.ld,
                    oa.batch_stride,
                    ob.batch_stride,
                    oc.batch_stride,
                    align_a,
                    align_b,
                    align_c,
                    tf32};
  auto found = gemm_->algorithms.find(key);
  if (found == gemm_->algorithms.end()) {
    Preference pref;
    MEGATRON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
    const std::uint64_t workspace = kWorkspaceBytes;
    MEGATRON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
    MEGATRON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b, sizeof align_b));
    MEGATRON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof align_a));
    MEGATRON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
    MEGATRON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c));
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    MEGATRON_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(gemm_->handle, desc.desc, lb.layout,
                                                         la.layout, lc.layout, lc.layout, pref.pref,
                                                         1, &result, &count));
    if (count == 0) {
      ops::fail(op, "cuBLASLt has no algorithm for " + a.describe() + (trans_a ? "^T" : "") +
                        " x " + b.describe() + (trans_b ? "^T" : "") + " -> " + c.describe());
    }
    found = gemm_->algorithms.emplace(key, result.algo).first;
  }

  const double alpha64 = alpha, beta64 = beta;
  const void* alpha_ptr = f64 ? static_cast<const void*>(&alpha64) : &alpha;
  const void* beta_ptr = f64 ? static_cast<const void*>(&beta64) : &beta;
  MEGATRON_CUBLAS_CHECK(cublasLtMatmul(gemm_->handle, desc.desc, alpha_ptr, b.raw_data(), lb.layout,
                                       a.raw_data(), la.layout, beta_ptr, c.raw_data(), lc.layout,
                                       c.raw_data(), lc.layout, &found->second, gemm_->workspace,
                                       kWorkspaceBytes, stream_));
}

}  // namespace megatron::cuda
