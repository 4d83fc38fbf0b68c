// Backend::grouped_gemm on CUDA: every non-empty expert group is one problem of a single
// cublasGemmGroupedBatchedEx call (row-major problems mapped onto cuBLAS's column-major convention
// as gemm.cu maps them). cuBLAS's grouped form takes one dtype for the inputs and the output, so
// f32 (TF32 when allowed) and f64 problems on contiguous operands go through it; mixed precision
// (bf16/f16 inputs, f32 output), strided views and a single non-empty group run the default loop
// of cuBLASLt gemms.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/grouped_gemm_checks.h"

namespace megatron::cuda {

namespace {

void check_blas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("grouped_gemm: ") + what + ": " + cublasGetStatusName(status) + ": " +
              cublasGetStatusString(status));
}
#define MEGATRON_BLAS_CHECK(expr) check_blas((expr), #expr)

// The problems of one call, as cuBLAS's column-major C^T = op(B)^T op(A)^T: the first operand is
// b's storage, the second a's. Sizes and leading dimensions are per problem; pointers are
// element offsets into b, a and c until resolved.
struct Problems {
  std::vector<cublasOperation_t> op_first, op_second;
  std::vector<std::int64_t> m, n, k, ld_first, ld_second, ld_out, offset_first, offset_second,
      offset_out;
  void add(bool trans_first, bool trans_second, std::int64_t rows_out, std::int64_t cols_out,
           std::int64_t inner, std::int64_t ld_b, std::int64_t ld_a, std::int64_t ld_c,
           std::int64_t at_b, std::int64_t at_a, std::int64_t at_c) {
    op_first.push_back(trans_first ? CUBLAS_OP_T : CUBLAS_OP_N);
    op_second.push_back(trans_second ? CUBLAS_OP_T : CUBLAS_OP_N);
    m.push_back(cols_out);  // column-major C^T: the row-major output's columns first
    n.push_back(rows_out);
    k.push_back(inner);
    ld_first.push_back(ld_b);
    ld_second.push_back(ld_a);
    ld_out.push_back(ld_c);
    offset_first.push_back(at_b);
    offset_second.push_back(at_a);
    offset_out.push_back(at_c);
  }
  std::size_t size() const { return m.size(); }
};

}  // namespace

struct GroupedGemmState {
  cublasHandle_t handle = nullptr;
};

void GroupedGemmStateDeleter::operator()(GroupedGemmState* state) const {
  if (state->handle) cublasDestroy(state->handle);
  delete state;
}

void CudaBackend::grouped_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const std::vector<std::int64_t>& group_rows, Tensor& c, float alpha,
                               float beta) {
  constexpr const char* op = "grouped_gemm";
  check_grouped_gemm_shapes(a, trans_a, b, trans_b, group_rows, c);
  check_here(op, "a", a);
  check_here(op, "b", b);
  check_here(op, "c", c);
  const DType dt = a.dtype();
  const bool one_dtype =
      (dt == DType::f32 || dt == DType::f64) && b.dtype() == dt && c.dtype() == dt;
  const auto problems = std::count_if(group_rows.begin(), group_rows.end(),
                                      [](std::int64_t rows) { return rows > 0; });
  // One problem is a plain gemm (and gives its bits); several of other dtypes or layouts loop.
  if (!one_dtype || problems < 2 || !a.is_contiguous() || !b.is_contiguous() ||
      !c.is_contiguous()) {
    Backend::grouped_gemm(a, trans_a, b, trans_b, group_rows, c, alpha, beta);
    return;
  }

  Problems p;
  std::int64_t row = 0;
  for (std::size_t g = 0; g < group_rows.size(); ++g) {
    const std::int64_t rows = group_rows[g], gi = static_cast<std::int64_t>(g);
    if (!trans_a) {
      // c_g (rows, N) = a_g (rows, K) @ op(b[g]); b[g] stored (K, N), or (N, K) when trans_b.
      const std::int64_t kk = a.size(1), nn = c.size(1);
      if (rows > 0) {
        p.add(trans_b, false, rows, nn, kk, b.size(2), kk, nn, gi * b.size(1) * b.size(2), row * kk,
              row * nn);
      }
    } else {
      // c[g] (K, N) = a_g^T (K, rows) @ b_g (rows, N); no rows: c[g] = beta * c[g].
      const std::int64_t kk = a.size(1), nn = b.size(1);
      if (rows > 0) {
        p.add(false, true, kk, nn, rows, nn, kk, nn, row * nn, row * kk, gi * kk * nn);
      } else {
        Tensor c_g = c.slice(0, gi, 1).view({c.size(1), c.size(2)});
        if (beta == 0.0f) {
          fill(c_g, 0.0);
        } else {
          scale(c_g, beta);
        }
      }
    }
    row += rows;
  }
  if (p.size() == 0) return;

  DeviceGuard guard(ordinal_);
  if (!grouped_) {
    grouped_.reset(new GroupedGemmState);
    MEGATRON_BLAS_CHECK(cublasCreate(&grouped_->handle));
  }
  MEGATRON_BLAS_CHECK(cublasSetStream(grouped_->handle, stream_));

  // The operands' addresses go to the device (cuBLAS reads them there); sizes, leading
  // dimensions and scalars stay on the host.
  const auto count = static_cast<std::int64_t>(p.size());
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dt));
  auto address = [elem](const Tensor& t, std::int64_t offset) {
    return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(t.raw_data()) +
                                     static_cast<std::uintptr_t>(offset * elem));
  };
  std::vector<std::int64_t> addresses;
  for (std::size_t i = 0; i < p.size(); ++i)
    addresses.push_back(address(b, p.offset_first[i]));
  for (std::size_t i = 0; i < p.size(); ++i)
    addresses.push_back(address(a, p.offset_second[i]));
  for (std::size_t i = 0; i < p.size(); ++i)
    addresses.push_back(address(c, p.offset_out[i]));
  Tensor pointers = empty({3 * count}, DType::i64);
  copy(Tensor::from(addresses, {3 * count}), pointers);
  auto* const table = static_cast<void**>(pointers.raw_data());

  const std::vector<std::int64_t> one_each(p.size(), 1);
  const bool f64 = dt == DType::f64;
  const cudaDataType_t type = f64 ? CUDA_R_64F : CUDA_R_32F;
  const cublasComputeType_t compute = f64           ? CUBLAS_COMPUTE_64F
                                      : allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                    : CUBLAS_COMPUTE_32F;
  const std::vector<float> alpha32(p.size(), alpha), beta32(p.size(), beta);
  const std::vector<double> alpha64(p.size(), alpha), beta64(p.size(), beta);
  MEGATRON_BLAS_CHECK(cublasGemmGroupedBatchedEx_64(
      grouped_->handle, p.op_first.data(), p.op_second.data(), p.m.data(), p.n.data(), p.k.data(),
      f64 ? static_cast<const void*>(alpha64.data()) : alpha32.data(), table, type,
      p.ld_first.data(), table + count, type, p.ld_second.data(),
      f64 ? static_cast<const void*>(beta64.data()) : beta32.data(), table + 2 * count, type,
      p.ld_out.data(), count, one_each.data(), compute));
}

}  // namespace megatron::cuda
