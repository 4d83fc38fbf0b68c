// CPU copy between strided views (transposes, permutes, slices into a larger tensor, both sides
// strided), small and large enough to run in parallel, in every dtype: the result equals an
// element-by-element copy, and nothing outside the destination view is touched.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "megatron/backend/backend.h"

namespace megatron {
namespace {

Backend& cpu() {
  return backend_for(Device::cpu());
}

// Distinct values per element, exact in every dtype tested (small integers).
Tensor numbered(const Shape& shape, DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>(i % 251) - 100.0;
  return Tensor::from(v, shape).to(dtype);
}

// Copies `src` into view(dst_whole) and checks the view's values and that nothing else changed.
template <typename View>
void expect_copy(const Tensor& src, Tensor dst_whole, View view) {
  const std::vector<double> before = dst_whole.to_vector<double>();
  Tensor dst_view = view(dst_whole);
  cpu().copy(src, dst_view);
  EXPECT_EQ(dst_view.to_vector<double>(), src.to_vector<double>());
  Tensor marker = Tensor::zeros(dst_whole.shape(), DType::f64);
  Tensor marked = view(marker);
  cpu().fill(marked, 1.0);
  const std::vector<double> after = dst_whole.to_vector<double>(),
                            in_view = marker.to_vector<double>();
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (in_view[i] == 0.0) {
      ASSERT_EQ(after[i], before[i]) << "element " << i << " outside the view was written";
    }
  }
}

TEST(CpuCopy, StridedViewsInEveryDtype) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    for (std::int64_t n : {3, 65, 300}) {  // 300 x 301 x 2 > the parallel threshold
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n));
      const Tensor a = numbered({n, n + 1, 2}, dtype);
      // Permuted source into a contiguous destination.
      expect_copy(a.permute({2, 1, 0}), Tensor::zeros({2, n + 1, n}, dtype),
                  [](const Tensor& t) { return t; });
      // Contiguous source into a transposed view.
      expect_copy(a, numbered({n + 1, n, 2}, dtype),
                  [](const Tensor& t) { return t.transpose(0, 1); });
      // Into a slice of the last dimension of a wider tensor (rows unit-stride, not adjacent).
      expect_copy(a, numbered({n, n + 1, 5}, dtype),
                  [](const Tensor& t) { return t.slice(2, 1, 2); });
      // Both sides strided in the last dimension.
      expect_copy(a.permute({1, 0, 2}).transpose(0, 1), numbered({n + 1, n, 4}, dtype),
                  [](const Tensor& t) { return t.slice(2, 2, 2).transpose(0, 1); });
      expect_copy(numbered({2, n + 1, n}, dtype).permute({2, 1, 0}), numbered({n, 2, n + 1}, dtype),
                  [](const Tensor& t) {
                    return t.permute({0, 2, 1});
                  });
    }
  }
}

}  // namespace
}  // namespace megatron
