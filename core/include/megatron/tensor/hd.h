// MEGATRON_HD marks functions compiled for both host and CUDA device, so per-element math is
// written once and the CPU tests exercise the same code the GPU runs.
#pragma once

#if defined(__CUDACC__)
#define MEGATRON_HD __host__ __device__ __forceinline__
#else
#define MEGATRON_HD inline
#endif
