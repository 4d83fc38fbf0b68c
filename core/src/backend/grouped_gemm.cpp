// Backend::grouped_gemm's default: one gemm per expert group on views of the operands. Debian 12's
// OpenBLAS (0.3.21) has no grouped GEMM and oneDNN's matmul no grouped form, so on CPU a loop over
// the groups is the library call; each group's GEMM is threaded as any other.
#include <numeric>
#include <string>

#include "backend/grouped_gemm_checks.h"
#include "megatron/backend/backend.h"
#include "megatron/error.h"

namespace megatron {

namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw Error("grouped_gemm: " + what);
}

std::string groups_str(const std::vector<std::int64_t>& group_rows) {
  std::string s = "[";
  for (std::size_t g = 0; g < group_rows.size(); ++g)
    s += (g ? ", " : "") + std::to_string(group_rows[g]);
  return s + "]";
}

}  // namespace

void check_grouped_gemm_shapes(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const std::vector<std::int64_t>& group_rows, const Tensor& c) {
  const auto groups = static_cast<std::int64_t>(group_rows.size());
  if (groups == 0) refuse("no groups");
  for (std::int64_t rows : group_rows) {
    if (rows < 0) refuse("negative group size in " + groups_str(group_rows));
  }
  const std::int64_t m = std::accumulate(group_rows.begin(), group_rows.end(), std::int64_t{0});
  const Tensor& stacked = trans_a ? b : c;  // the other row-grouped operand
  if (a.dim() != 2 || a.size(0) != m || stacked.dim() != 2 || stacked.size(0) != m) {
    refuse("groups " + groups_str(group_rows) + " (" + std::to_string(m) + " rows) for a " +
           shape_str(a.shape()) + (trans_a ? " and b " : " and c ") + shape_str(stacked.shape()));
  }
  const Tensor& weights = trans_a ? c : b;
  if (weights.dim() != 3 || weights.size(0) != groups) {
    refuse(std::string(trans_a ? "c" : "b") + " must be (" + std::to_string(groups) +
           ", ., .) for " + std::to_string(groups) + " groups, got " + shape_str(weights.shape()));
  }
  if (trans_a && trans_b) refuse("trans_b with trans_a (the weight gradient) is not supported");
}

void Backend::grouped_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                           const std::vector<std::int64_t>& group_rows, Tensor& c, float alpha,
                           float beta) {
  check_grouped_gemm_shapes(a, trans_a, b, trans_b, group_rows, c);
  std::int64_t first = 0;
  for (std::size_t g = 0; g < group_rows.size(); ++g) {
    const std::int64_t rows = group_rows[g];
    const auto gi = static_cast<std::int64_t>(g);
    if (trans_a) {
      Tensor c_g = c.slice(0, gi, 1).view({c.size(1), c.size(2)});
      if (rows == 0) {
        // No rows: the product is zero.
        if (beta == 0.0f) {
          fill(c_g, 0.0);
        } else {
          scale(c_g, beta);
        }
      } else {
        gemm(a.slice(0, first, rows), true, b.slice(0, first, rows), false, c_g, alpha, beta);
      }
    } else if (rows > 0) {
      Tensor c_g = c.slice(0, first, rows);
      gemm(a.slice(0, first, rows), false, b.slice(0, gi, 1).view({b.size(1), b.size(2)}), trans_b,
           c_g, alpha, beta);
    }
    first += rows;
  }
}

}  // namespace megatron
