// Per-row ops of Mixture of Experts (scale_rows, row_dots) against fp64 loops: strided rows,
// in-place scaling, f64, empty inputs and argument errors.
#include <string>
#include <vector>

#include "backend_test_util.h"

namespace megatron::testing {
namespace {

constexpr std::int64_t kRows = 5, kCols = 37;

class RowOps : public BackendTest {};

TEST_P(RowOps, ScaleRowsMultipliesEachRowByItsScale) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = random_tensor({kRows, kCols}, dt, 1);
    const Tensor s = random_tensor({kRows}, dt, 2);
    Tensor want = Tensor::empty({kRows, kCols}, DType::f64);
    const std::vector<double> xv = x.to_vector<double>(), sv = s.to_vector<double>();
    for (std::int64_t m = 0; m < kRows; ++m)
      for (std::int64_t j = 0; j < kCols; ++j)
        want.data<double>()[m * kCols + j] =
            xv[static_cast<std::size_t>(m * kCols + j)] * sv[static_cast<std::size_t>(m)];
    Tensor y = empty({kRows, kCols}, dt);
    be().scale_rows(upload(x), upload(s), y);
    EXPECT_TRUE(all_close(download(y), want, tolerance_for(dt)));
    // In place, on rows that are a strided view (every other column of a wider tensor's rows).
    Tensor wide = upload(random_tensor({kRows, 2 * kCols}, dt, 3));
    Tensor left = wide.slice(1, 0, kCols);
    be().copy(upload(x), left);
    be().scale_rows(left, upload(s), left);
    EXPECT_TRUE(all_close(download(left), want, tolerance_for(dt)));
  }
}

TEST_P(RowOps, RowDotsSumEachRowsProducts) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor a = random_tensor({kRows, kCols}, dt, 4);
    const Tensor b = random_tensor({kRows, kCols}, dt, 5);
    const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
    Tensor want = Tensor::empty({kRows}, DType::f64);
    for (std::int64_t m = 0; m < kRows; ++m) {
      double sum = 0;
      for (std::int64_t j = 0; j < kCols; ++j)
        sum += av[static_cast<std::size_t>(m * kCols + j)] *
               bv[static_cast<std::size_t>(m * kCols + j)];
      want.data<double>()[m] = sum;
    }
    Tensor out = empty({kRows}, dt);
    be().row_dots(upload(a), upload(b), out);
    EXPECT_TRUE(all_close(download(out), want, tolerance_for(dt)));
  }
  Tensor none = empty({0}, DType::f32);
  be().row_dots(empty({0, kCols}, DType::f32), empty({0, kCols}, DType::f32), none);
}

TEST_P(RowOps, RefusesMismatchedShapesAndDtypes) {
  const Tensor x = upload(random_tensor({kRows, kCols}, DType::f32, 1));
  Tensor y = empty({kRows, kCols}, DType::f32);
  EXPECT_THROW(be().scale_rows(x, upload(random_tensor({kRows + 1}, DType::f32, 2)), y), Error);
  EXPECT_THROW(be().scale_rows(x, upload(random_tensor({kRows}, DType::f64, 2)), y), Error);
  Tensor out = empty({kRows}, DType::f32);
  EXPECT_THROW(be().row_dots(x, upload(random_tensor({kRows, kCols + 1}, DType::f32, 3)), out),
               Error);
}

MEGATRON_INSTANTIATE_BACKENDS(RowOps);

}  // namespace
}  // namespace megatron::testing
