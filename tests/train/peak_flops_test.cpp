// The start-up peak measurement behind the MFU: a positive rate in each GEMM precision, and the
// utilization it gives.
#include "megatron/train/peak_flops.h"

#include <gtest/gtest.h>

namespace megatron::train {
namespace {

TEST(PeakFlops, MeasuresAPositiveRateInEachPrecisionOnTheCpu) {
  Backend& cpu = backend_for(Device::cpu());
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const double peak = measure_peak_tflops(cpu, dtype);
    EXPECT_GT(peak, 0.0) << dtype_name(dtype);
    EXPECT_LT(peak, 1e3) << dtype_name(dtype);  // a CPU rank is far below a petaflop
  }
}

TEST(PeakFlops, UtilizationIsThroughputOverPeak) {
  EXPECT_DOUBLE_EQ(model_flops_utilization(0.08, 0.2), 0.4);
  EXPECT_EQ(model_flops_utilization(0.08, 0.0), 0.0);
}

}  // namespace
}  // namespace megatron::train
