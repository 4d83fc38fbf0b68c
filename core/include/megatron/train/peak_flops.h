// The peak one rank's device reaches at the run's GEMM precision, the denominator of the model
// FLOP utilization (MFU) in the training log: measured once at start-up, or configured.
#pragma once

#include "megatron/backend/backend.h"

namespace megatron::train {

// The best TFLOP/s of a few square GEMMs in `dtype` (f32, bf16, f16; f32 output and
// accumulation) on `backend`, after a warm-up: n = 1024 on the CPU (about 10 ms each on two
// cores), 8192 on a GPU. It only reads the clock: no result of the run depends on it.
double measure_peak_tflops(Backend& backend, DType dtype);

// Model FLOP utilization: the model's TFLOP/s per rank over the peak; 0 when the peak is not
// positive.
inline double model_flops_utilization(double tflops_per_rank, double peak_tflops) {
  return peak_tflops > 0 ? tflops_per_rank / peak_tflops : 0.0;
}

}  // namespace megatron::train
