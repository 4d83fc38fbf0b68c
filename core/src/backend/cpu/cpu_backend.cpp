// CPU backend: memory ops, random fills, backend lookup and the compute-thread setting.
#include "backend/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/rows.h"
#include "megatron/tensor/philox.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace megatron {

Backend::~Backend() = default;

namespace cpu {

namespace {

// Logical element i of `t` is at storage index offsets[i / n] + (i % n) * stride(-1).
template <typename Fn>
void for_each_element(const Tensor& t, Fn&& fn) {
  if (t.numel() == 0) return;
  if (t.dim() == 0) {
    fn(std::int64_t{0}, std::int64_t{0});
    return;
  }
  const auto offsets = row_offsets(t);
  const std::int64_t n = t.size(-1), stride = t.stride(-1);
  const auto rows = static_cast<std::int64_t>(offsets.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < n; ++j)
      fn(r * n + j, offsets[r] + j * stride);
  }
}

void check_host(const char* op, const char* name, const Tensor& t) {
  ops::check_device(op, name, t, Device::cpu());
}

}  // namespace

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  check_host("copy", "src", src);
  check_host("copy", "dst", dst);
  ops::check_same_shape("copy", "dst", dst, "src", src);
  ops::check_same_dtype("copy", "dst", dst, "src", src);
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
  // Row by row (the last dimension): a row that is unit-stride on both sides is one memcpy
  // (transposes and TP/sequence shards copy whole rows); rows are independent, so large copies
  // split them across threads.
  const std::size_t size = src.element_size();
  const std::vector<std::int64_t> src_rows = row_offsets(src), dst_rows = row_offsets(dst);
  const char* src_base = static_cast<const char*>(src.storage()->data()) +
                         static_cast<std::size_t>(src.offset()) * size;
  char* dst_base =
      static_cast<char*>(dst.storage()->data()) + static_cast<std::size_t>(dst.offset()) * size;
  const std::int64_t n = dst.dim() ? dst.size(-1) : 1;
  const std::int64_t src_step = src.dim() ? src.stride(-1) : 1,
                     dst_step = dst.dim() ? dst.stride(-1) : 1;
  const auto rows = static_cast<std::int64_t>(dst_rows.size());
#pragma omp parallel for schedule(static) if (src.numel() > kParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const char* from =
        src_base + src_rows[static_cast<std::size_t>(r)] * static_cast<std::int64_t>(size);
    char* to = dst_base + dst_rows[static_cast<std::size_t>(r)] * static_cast<std::int64_t>(size);
    if (src_step == 1 && dst_step == 1) {
      std::memcpy(to, from, static_cast<std::size_t>(n) * size);
      continue;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      std::memcpy(to + j * dst_step * static_cast<std::int64_t>(size),
                  from + j * src_step * static_cast<std::int64_t>(size), size);
    }
  }
}

void CpuBackend::fill(Tensor& t, double value) {
  check_host("fill", "t", t);
  void* base = t.storage()->data();
  const std::int64_t offset = t.offset();
  const DType dtype = t.dtype();
  for_each_element(
      t, [&](std::int64_t, std::int64_t s) { store_from_double(base, dtype, offset + s, value); });
}

void CpuBackend::cast(const Tensor& src, Tensor& dst) {
  check_host("cast", "src", src);
  check_host("cast", "dst", dst);
  ops::check_same_shape("cast", "dst", dst, "src", src);
  ops::check_dtype("cast", "src", src, {DType::f32, DType::f64, DType::bf16, DType::f16});
  ops::check_dtype("cast", "dst", dst, {DType::f32, DType::f64, DType::bf16, DType::f16});
  // Mixed precision casts every GEMM input: contiguous f32 -> bf16/f16 gets a parallel loop.
  // Same bits as the generic path, which also rounds once from the float value.
  if (src.is_contiguous() && dst.is_contiguous() && src.dtype() == DType::f32 &&
      (dst.dtype() == DType::bf16 || dst.dtype() == DType::f16)) {
    const float* in = src.data<float>();
    const std::int64_t count = src.numel();
    if (dst.dtype() == DType::bf16) {
      bf16* out = dst.data<bf16>();
#pragma omp parallel for schedule(static) if (count > 32768)
      for (std::int64_t i = 0; i < count; ++i)
        out[i] = bf16(in[i]);
    } else {
      f16* out = dst.data<f16>();
#pragma omp parallel for schedule(static) if (count > 32768)
      for (std::int64_t i = 0; i < count; ++i)
        out[i] = f16(in[i]);
    }
    return;
  }
  // Widening (exact) for the GEMM operands of bf16 weights held for generation, and logits.
  if (src.is_contiguous() && dst.is_contiguous() && dst.dtype() == DType::f32 &&
      (src.dtype() == DType::bf16 || src.dtype() == DType::f16)) {
    float* out = dst.data<float>();
    const std::int64_t count = src.numel();
    if (src.dtype() == DType::bf16) {
      const bf16* in = src.data<bf16>();
#pragma omp parallel for schedule(static) if (count > 32768)
      for (std::int64_t i = 0; i < count; ++i)
        out[i] = static_cast<float>(in[i]);
    } else {
      const f16* in = src.data<f16>();
#pragma omp parallel for schedule(static) if (count > 32768)
      for (std::int64_t i = 0; i < count; ++i)
        out[i] = static_cast<float>(in[i]);
    }
    return;
  }
  const auto dst_offsets = row_offsets(dst);
  const void* src_base = src.storage()->data();
  void* dst_base = dst.storage()->data();
  const std::int64_t n = dst.dim() ? dst.size(-1) : 1, dst_stride = dst.dim() ? dst.stride(-1) : 1;
  for_each_element(src, [&](std::int64_t i, std::int64_t s) {
    const std::int64_t d = dst_offsets[static_cast<std::size_t>(i / n)] + (i % n) * dst_stride;
    // Through double: exact for every source value, then one rounding to the destination.
    store_from_double(dst_base, dst.dtype(), dst.offset() + d,
                      load_as_double(src_base, src.dtype(), src.offset() + s));
  });
}

void CpuBackend::fill_normal(Tensor& t, float mean, float std, std::uint64_t seed,
                             std::uint64_t offset) {
  check_host("fill_normal", "t", t);
  ops::check_dtype("fill_normal", "t", t, {DType::f32, DType::f64, DType::bf16, DType::f16});
  void* base = t.storage()->data();
  for_each_element(t, [&](std::int64_t i, std::int64_t s) {
    const float v = mean + std * philox_normal_at(seed, offset, static_cast<std::uint64_t>(i));
    store_from_double(base, t.dtype(), t.offset() + s, v);
  });
}

void CpuBackend::fill_uniform(Tensor& t, float low, float high, std::uint64_t seed,
                              std::uint64_t offset) {
  check_host("fill_uniform", "t", t);
  ops::check_dtype("fill_uniform", "t", t, {DType::f32, DType::f64, DType::bf16, DType::f16});
  void* base = t.storage()->data();
  for_each_element(t, [&](std::int64_t i, std::int64_t s) {
    // philox_uniform is in (0, 1]; 1 - u is in [0, 1).
    const float u = 1.0f - philox_uniform_at(seed, offset, static_cast<std::uint64_t>(i));
    store_from_double(base, t.dtype(), t.offset() + s, low + (high - low) * u);
  });
}

}  // namespace cpu

namespace {
std::mutex threads_mutex;
int threads_setting = 0;

int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  // Ranks sharing a node split its cores rather than each starting one thread per core.
  int local_ranks = 1;
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* env = std::getenv(name); env && std::atoi(env) > 0) {
      local_ranks = std::atoi(env);
      break;
    }
  }
  return std::max(1, omp_get_num_procs() / local_ranks);
}
}  // namespace

void set_compute_threads(int n) {
  std::lock_guard lock(threads_mutex);
  threads_setting = n > 0 ? n : default_threads();
  omp_set_num_threads(threads_setting);
  openblas_set_num_threads(threads_setting);
}

int compute_threads() {
  std::lock_guard lock(threads_mutex);
  return threads_setting > 0 ? threads_setting : default_threads();
}

Backend& cuda_backend(int ordinal);  // backend/cuda (or its stand-in without CUDA)

Backend& backend_for(Device device) {
  switch (device.type) {
    case Device::Type::cpu: {
      static cpu::CpuBackend backend;
      return backend;
    }
    case Device::Type::cuda:
      return cuda_backend(device.index);
    case Device::Type::meta:
      break;
  }
  throw Error("the meta device has no backend: meta tensors are for planning, not compute");
}

}  // namespace megatron
