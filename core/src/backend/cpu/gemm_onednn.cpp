// GEMM through oneDNN's matmul primitive. Creating a primitive descriptor costs far more than a
// small GEMM, so primitives are cached by everything that shapes the generated kernel: dtypes,
// dims, strides, alpha, beta and the OpenMP thread count. Data pointers are bound per call.
#include "backend/cpu/gemm_onednn.h"

#include <omp.h>

#include <array>
#include <bit>
#include <cstdlib>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>

#include <dnnl.hpp>

#include "backend/cpu/blas_capabilities.h"
#include "backend/op_checks.h"

namespace megatron::cpu {

namespace {

using dnnl::memory;

struct MatmulKey {
  std::array<std::int64_t, 17> fields{};
  bool operator==(const MatmulKey&) const = default;
};

struct MatmulKeyHash {
  std::size_t operator()(const MatmulKey& key) const {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (std::int64_t f : key.fields) {
      h ^= static_cast<std::uint64_t>(f);
      h *= 1099511628211ull;
    }
    return static_cast<std::size_t>(h);
  }
};

MatmulKey key_for(const GemmProblem& p, float alpha, float beta) {
  return {{static_cast<std::int64_t>(p.input_dtype), p.batch, p.m, p.n, p.k, p.a.batch,
           p.a.batch_stride, p.a.ld, p.a.trans, p.b.batch, p.b.batch_stride, p.b.ld, p.b.trans,
           p.c_batch_stride, p.ldc,
           static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(alpha)) << 32 |
               std::bit_cast<std::uint32_t>(beta),
           omp_get_max_threads()}};
}

struct CachedMatmul {
  bool usable = false;  // false: oneDNN offers only its reference (or an emulating) kernel
  std::string impl;
  dnnl::matmul primitive;
  memory::desc a_desc, b_desc, c_desc, scratchpad_desc;
};

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

memory::data_type onednn_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return memory::data_type::f32;
    case DType::bf16:
      return memory::data_type::bf16;
    case DType::f16:
      return memory::data_type::f16;
    default:
      ops::fail("gemm", "oneDNN path got unsupported dtype " + std::string(dtype_name(dtype)));
  }
}

// Logical (batch, rows, cols) of op(x); a transposed operand is described by swapping strides.
memory::desc operand_desc(const GemmOperand& x, memory::data_type type, std::int64_t rows,
                          std::int64_t cols) {
  const memory::dims strides =
      x.trans ? memory::dims{x.batch_stride, 1, x.ld} : memory::dims{x.batch_stride, x.ld, 1};
  return memory::desc({x.batch, rows, cols}, type, strides);
}

std::shared_ptr<const CachedMatmul> create_matmul(const GemmProblem& p, float alpha, float beta) {
  auto entry = std::make_shared<CachedMatmul>();
  const memory::data_type in = onednn_type(p.input_dtype);
  entry->a_desc = operand_desc(p.a, in, p.m, p.k);
  entry->b_desc = operand_desc(p.b, in, p.k, p.n);
  entry->c_desc = memory::desc({p.batch, p.m, p.n}, memory::data_type::f32,
                               memory::dims{p.c_batch_stride, p.ldc, 1});
  dnnl::primitive_attr attr;
  // Scratch memory comes from the calling thread (see scratchpad()), so one cached primitive can
  // run on several threads at once.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops post;
    post.append_sum(beta);
    attr.set_post_ops(post);
  }
  try {
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(entry->a_desc, entry->b_desc, entry->c_desc), attr, cpu_engine());
    entry->impl = pd.impl_info_str();
    if (std::string_view(entry->impl).starts_with("ref")) return entry;
    // Without AVX512-BF16 (which every AMX CPU also has) oneDNN 2.6 runs bf16 through a gemm:jit
    // that converts as it goes, at a sixth of its f32 rate (34 against 216 GFLOP/s on 2 threads
    // of an AVX-512 Xeon, bench/RESULTS.md): the exact widening to f32 and the f32 route are
    // faster there.
    if (p.input_dtype == DType::bf16 && bf16_gemm_widened()) return entry;
    entry->scratchpad_desc = pd.scratchpad_desc();
    entry->primitive = dnnl::matmul(pd);
    entry->usable = true;
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) {
      ops::fail("gemm", std::string("oneDNN matmul could not be created: ") + e.what());
    }
  }
  return entry;
}

// A bounded least-recently-used cache: a training step reuses a few dozen shapes, but a process
// that sweeps shapes must not grow without limit.
class MatmulCache {
 public:
  std::shared_ptr<const CachedMatmul> get(const GemmProblem& p, float alpha, float beta) {
    const MatmulKey key = key_for(p, alpha, beta);
    {
      std::lock_guard lock(mutex_);
      if (auto it = index_.find(key); it != index_.end()) {
        entries_.splice(entries_.begin(), entries_, it->second);
        return it->second->second;
      }
    }
    auto created = create_matmul(p, alpha, beta);  // outside the lock: can take milliseconds
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) return it->second->second;
    entries_.emplace_front(key, created);
    index_.emplace(key, entries_.begin());
    if (entries_.size() > kCapacity) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
    return created;
  }

 private:
  static constexpr std::size_t kCapacity = 256;
  using Entry = std::pair<MatmulKey, std::shared_ptr<const CachedMatmul>>;
  std::mutex mutex_;
  std::list<Entry> entries_;
  std::unordered_map<MatmulKey, std::list<Entry>::iterator, MatmulKeyHash> index_;
};

MatmulCache& matmul_cache() {
  static MatmulCache cache;
  return cache;
}

// Per-thread scratch memory, grown on demand and kept for the thread's lifetime.
void* scratchpad(std::size_t bytes) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> buffer;
  thread_local std::size_t capacity = 0;
  if (bytes > capacity) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    buffer.reset(std::aligned_alloc(64, rounded));
    if (!buffer) throw std::bad_alloc();
    capacity = rounded;
  }
  return buffer.get();
}

}  // namespace

bool onednn_matmul(const GemmProblem& p, float alpha, float beta) {
  const auto matmul = matmul_cache().get(p, alpha, beta);
  if (!matmul->usable) return false;
  const dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  memory a(matmul->a_desc, engine, const_cast<void*>(p.a.data));
  memory b(matmul->b_desc, engine, const_cast<void*>(p.b.data));
  memory c(matmul->c_desc, engine, p.c);
  const std::size_t scratch_bytes = matmul->scratchpad_desc.get_size();
  memory scratch(matmul->scratchpad_desc, engine,
                 scratch_bytes ? scratchpad(scratch_bytes) : nullptr);
  matmul->primitive.execute(stream, {{DNNL_ARG_SRC, a},
                                     {DNNL_ARG_WEIGHTS, b},
                                     {DNNL_ARG_DST, c},
                                     {DNNL_ARG_SCRATCHPAD, scratch}});
  stream.wait();
  return true;
}

std::string onednn_matmul_impl(const GemmProblem& p, float alpha, float beta) {
  const auto matmul = matmul_cache().get(p, alpha, beta);
  return matmul->usable ? matmul->impl : std::string();
}

}  // namespace megatron::cpu
