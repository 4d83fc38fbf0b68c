// CUDA elementwise ops: bias add and its gradient, add/scale/axpy, GeLU, SwiGLU and dropout, with
// the per-element math of elementwise_math.h (the same functions the CPU backend runs).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/elementwise_math.h"

namespace megatron::cuda {

namespace {

// ---- generic element maps over strided views (logical index i in row-major order) -----------

template <typename T, typename F>
__global__ void unary_kernel(const T* x, Layout lx, T* y, Layout ly, std::int64_t n, F f) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const T v = x[offset_at(lx, i)];
    y[offset_at(ly, i)] = f(i, v);
  }
}

template <typename T, typename F>
__global__ void binary_kernel(const T* a, Layout la, const T* b, Layout lb, T* y, Layout ly,
                              std::int64_t n, F f) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const T u = a[offset_at(la, i)], v = b[offset_at(lb, i)];
    y[offset_at(ly, i)] = f(u, v);
  }
}

struct Launch {
  const char* op;
  cudaStream_t stream;
};

template <typename T, typename F>
void map_unary(Launch l, const Tensor& x, Tensor& y, F f) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  unary_kernel<T><<<grid_for(n), kThreads, 0, l.stream>>>(
      static_cast<const T*>(x.raw_data()), layout_of(l.op, "x", x), static_cast<T*>(y.raw_data()),
      layout_of(l.op, "y", y), n, f);
  check_launch(l.op);
}

// `b_layout` may broadcast (stride 0) over a's shape.
template <typename T, typename F>
void map_binary(Launch l, const Tensor& a, const Tensor& b, const Layout& b_layout, Tensor& y,
                F f) {
  const std::int64_t n = a.numel();
  if (n == 0) return;
  binary_kernel<T><<<grid_for(n), kThreads, 0, l.stream>>>(
      static_cast<const T*>(a.raw_data()), layout_of(l.op, "a", a),
      static_cast<const T*>(b.raw_data()), b_layout, static_cast<T*>(y.raw_data()),
      layout_of(l.op, "y", y), n, f);
  check_launch(l.op);
}

template <typename T>
struct Sum {
  __device__ T operator()(T u, T v) const { return u + v; }
};
template <typename T>
struct Scaled {
  T factor;
  __device__ T operator()(std::int64_t, T v) const { return v * factor; }
};
template <typename T>
struct Axpy {  // (x, y) -> y + factor * x
  T factor;
  __device__ T operator()(T u, T v) const { return v + factor * u; }
};
template <typename T>
struct Gelu {
  bool tanh_form;
  __device__ T operator()(std::int64_t, T v) const {
    return tanh_form ? math::gelu_tanh(v) : math::gelu_erf(v);
  }
};
template <typename T>
struct GeluGrad {  // (dy, x) -> dx
  bool tanh_form;
  __device__ T operator()(T g, T v) const {
    return g * (tanh_form ? math::gelu_tanh_grad(v) : math::gelu_erf_grad(v));
  }
};
template <typename T>
struct Tanh {
  __device__ T operator()(std::int64_t, T v) const { return math::tanh_of(v); }
};
template <typename T>
struct TanhGrad {  // (dy, y) -> dx
  __device__ T operator()(T g, T v) const { return g * math::tanh_grad_from_output(v); }
};
template <typename T>
struct Swiglu {  // (gate, up) -> y
  __device__ T operator()(T gate, T up) const { return math::swiglu(gate, up); }
};
template <typename T>
struct Dropout {
  std::uint64_t seed, offset;
  float p;
  T scale;
  bool drop_all;
  __device__ T operator()(std::int64_t i, T v) const {
    if (drop_all) return T(0);
    return v * (math::dropout_keeps(seed, offset, static_cast<std::uint64_t>(i), p) ? scale : T(0));
  }
};

// ---- bias gradient: the CPU's chunked column sums, so both give the same bits ---------------

// partials[chunk][j] = sum of rows [32 chunk, 32 chunk + 32) of column j, in row order.
template <typename T>
__global__ void column_chunk_sums_kernel(const T* dy, Layout rows, std::int64_t col_stride,
                                         std::int64_t row_count, std::int64_t n, T* partials) {
  const std::int64_t chunks = (row_count + kRowsPerChunk - 1) / kRowsPerChunk;
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < chunks * n;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t chunk = t / n, j = t % n;
    const std::int64_t end = min(row_count, (chunk + 1) * kRowsPerChunk);
    T sum = T(0);
    for (std::int64_t r = chunk * kRowsPerChunk; r < end; ++r) {
      sum += dy[offset_at(rows, r) + j * col_stride];
    }
    partials[t] = sum;
  }
}

// ---- SwiGLU backward: two outputs per element ------------------------------------------------

template <typename T>
__global__ void swiglu_backward_kernel(const T* dy, Layout ldy, const T* gate, Layout lgate,
                                       const T* up, Layout lup, T* dgate, Layout ldgate, T* dup,
                                       Layout ldup, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    T dg, du;
    math::swiglu_grad(dy[offset_at(ldy, i)], gate[offset_at(lgate, i)], up[offset_at(lup, i)], dg,
                      du);
    dgate[offset_at(ldgate, i)] = dg;
    dup[offset_at(ldup, i)] = du;
  }
}

// ---- argument checks (as the CPU backend's) -------------------------------------------------

void check_at_least_1d(const char* op, const char* name, const Tensor& t) {
  if (t.dim() < 1) {
    ops::fail(op, std::string(name) + " must have at least 1 dimension, got " + t.describe());
  }
}

void check_dropout_p(const char* op, float p) {
  if (!(p >= 0.0f && p <= 1.0f)) ops::fail(op, "p must be in [0, 1], got " + std::to_string(p));
}

Shape with_last_dim(const Tensor& t, std::int64_t n) {
  Shape s = t.shape();
  s.back() = n;
  return s;
}

// The [gate | up] halves of the last dimension as views.
Tensor first_half(const Tensor& t) {
  return t.slice(t.dim() - 1, 0, t.size(-1) / 2);
}
Tensor second_half(const Tensor& t) {
  return t.slice(t.dim() - 1, t.size(-1) / 2, t.size(-1) / 2);
}

}  // namespace

// Float tensors on this device, same dtype as the reference.
#define CHECK_FLOAT(name, t) \
  check_here(op, name, t);   \
  ops::check_dtype(op, name, t, {DType::f32, DType::f64})
#define CHECK_LIKE(name, t, ref_name, ref) \
  CHECK_FLOAT(name, t);                    \
  ops::check_same_dtype(op, name, t, ref_name, ref)

void CudaBackend::bias_add(const Tensor& x, const Tensor& bias, Tensor& y) {
  constexpr const char* op = "bias_add";
  CHECK_FLOAT("x", x);
  CHECK_LIKE("y", y, "x", x);
  ops::check_same_shape(op, "y", y, "x", x);
  check_at_least_1d(op, "x", x);
  CHECK_LIKE("bias", bias, "x", x);
  ops::check_shape(op, "bias", bias, {x.size(-1)});
  // bias seen as a (rows, N) tensor whose rows all start at the same place.
  Layout broadcast;
  broadcast.rank = 2;
  broadcast.sizes[0] = rows_of(x);
  broadcast.sizes[1] = x.size(-1);
  broadcast.strides[0] = 0;
  broadcast.strides[1] = bias.stride(0);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    map_binary<T>({op, stream_}, x, bias, broadcast, y, Sum<T>{});
  });
}

void CudaBackend::bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate) {
  constexpr const char* op = "bias_grad";
  CHECK_FLOAT("dy", dy);
  check_at_least_1d(op, "dy", dy);
  CHECK_LIKE("dbias", dbias, "dy", dy);
  ops::check_shape(op, "dbias", dbias, {dy.size(-1)});
  const std::int64_t rows = rows_of(dy), n = dy.size(-1);
  if (n == 0) return;
  const std::int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, dy.dtype(), [&]<typename T>() {
    Tensor partials = Tensor::empty({std::max<std::int64_t>(chunks, 1), n}, dy.dtype(), device());
    if (chunks > 0) {
      column_chunk_sums_kernel<T><<<grid_for(chunks * n), kThreads, 0, stream_>>>(
          static_cast<const T*>(dy.raw_data()), rows_layout_of(op, "dy", dy), dy.stride(-1), rows,
          n, static_cast<T*>(partials.raw_data()));
      check_launch(op);
    }
    reduce_chunks_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(
        static_cast<const T*>(partials.raw_data()), chunks, n, static_cast<T*>(dbias.raw_data()),
        dbias.stride(0), accumulate);
    check_launch(op);
  });
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  constexpr const char* op = "add";
  CHECK_FLOAT("a", a);
  CHECK_LIKE("b", b, "a", a);
  ops::check_same_shape(op, "b", b, "a", a);
  CHECK_LIKE("y", y, "a", a);
  ops::check_same_shape(op, "y", y, "a", a);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    map_binary<T>({op, stream_}, a, b, layout_of(op, "b", b), y, Sum<T>{});
  });
}

void CudaBackend::scale(Tensor& x, double alpha) {
  constexpr const char* op = "scale";
  CHECK_FLOAT("x", x);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    map_unary<T>({op, stream_}, x, x, Scaled<T>{static_cast<T>(alpha)});
  });
}

void CudaBackend::axpy(double alpha, const Tensor& x, Tensor& y) {
  constexpr const char* op = "axpy";
  CHECK_FLOAT("x", x);
  CHECK_LIKE("y", y, "x", x);
  ops::check_same_shape(op, "y", y, "x", x);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    map_binary<T>({op, stream_}, x, y, layout_of(op, "y", y), y, Axpy<T>{static_cast<T>(alpha)});
  });
}

void CudaBackend::tanh_forward(const Tensor& x, Tensor& y) {
  constexpr const char* op = "tanh_forward";
  CHECK_FLOAT("x", x);
  CHECK_LIKE("y", y, "x", x);
  ops::check_same_shape(op, "y", y, "x", x);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    map_unary<T>({op, stream_}, x, y, Tanh<T>{});
  });
}

void CudaBackend::tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  constexpr const char* op = "tanh_backward";
  CHECK_FLOAT("y", y);
  CHECK_LIKE("dy", dy, "y", y);
  ops::check_same_shape(op, "dy", dy, "y", y);
  CHECK_LIKE("dx", dx, "y", y);
  ops::check_same_shape(op, "dx", dx, "y", y);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, y.dtype(), [&]<typename T>() {
    map_binary<T>({op, stream_}, dy, y, layout_of(op, "y", y), dx, TanhGrad<T>{});
  });
}

void CudaBackend::gelu_forward(const Tensor& x, Tensor& y, GeluApproximation approx) {
  constexpr const char* op = "gelu_forward";
  CHECK_FLOAT("x", x);
  CHECK_LIKE("y", y, "x", x);
  ops::check_same_shape(op, "y", y, "x", x);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    map_unary<T>({op, stream_}, x, y, Gelu<T>{approx == GeluApproximation::tanh});
  });
}

void CudaBackend::gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx,
                                GeluApproximation approx) {
  constexpr const char* op = "gelu_backward";
  CHECK_FLOAT("x", x);
  CHECK_LIKE("dy", dy, "x", x);
  ops::check_same_shape(op, "dy", dy, "x", x);
  CHECK_LIKE("dx", dx, "x", x);
  ops::check_same_shape(op, "dx", dx, "x", x);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    map_binary<T>({op, stream_}, dy, x, layout_of(op, "x", x), dx,
                  GeluGrad<T>{approx == GeluApproximation::tanh});
  });
}

void CudaBackend::swiglu_forward(const Tensor& x, Tensor& y) {
  constexpr const char* op = "swiglu_forward";
  CHECK_FLOAT("x", x);
  check_at_least_1d(op, "x", x);
  if (x.size(-1) % 2 != 0) {
    ops::fail(op, "x's last dimension holds [gate | up] and must be even, got " + x.describe());
  }
  CHECK_LIKE("y", y, "x", x);
  ops::check_shape(op, "y", y, with_last_dim(x, x.size(-1) / 2));
  const Tensor gate = first_half(x), up = second_half(x);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    map_binary<T>({op, stream_}, gate, up, layout_of(op, "x", up), y, Swiglu<T>{});
  });
}

void CudaBackend::swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  constexpr const char* op = "swiglu_backward";
  CHECK_FLOAT("x", x);
  check_at_least_1d(op, "x", x);
  if (x.size(-1) % 2 != 0) {
    ops::fail(op, "x's last dimension holds [gate | up] and must be even, got " + x.describe());
  }
  CHECK_LIKE("dy", dy, "x", x);
  ops::check_shape(op, "dy", dy, with_last_dim(x, x.size(-1) / 2));
  CHECK_LIKE("dx", dx, "x", x);
  ops::check_same_shape(op, "dx", dx, "x", x);
  const std::int64_t n = dy.numel();
  if (n == 0) return;
  const Tensor gate = first_half(x), up = second_half(x);
  Tensor dgate = first_half(dx), dup = second_half(dx);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    swiglu_backward_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(
        static_cast<const T*>(dy.raw_data()), layout_of(op, "dy", dy),
        static_cast<const T*>(gate.raw_data()), layout_of(op, "x", gate),
        static_cast<const T*>(up.raw_data()), layout_of(op, "x", up),
        static_cast<T*>(dgate.raw_data()), layout_of(op, "dx", dgate),
        static_cast<T*>(dup.raw_data()), layout_of(op, "dx", dup), n);
    check_launch(op);
  });
}

void CudaBackend::dropout_forward(const Tensor& x, float p, std::uint64_t seed,
                                  std::uint64_t offset, Tensor& y) {
  constexpr const char* op = "dropout_forward";
  CHECK_FLOAT("x", x);
  CHECK_LIKE("y", y, "x", x);
  ops::check_same_shape(op, "y", y, "x", x);
  check_dropout_p(op, p);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    map_unary<T>({op, stream_}, x, y,
                 Dropout<T>{seed, offset, p, math::dropout_scale<T>(p), p >= 1.0f});
  });
}

void CudaBackend::dropout_backward(const Tensor& dy, float p, std::uint64_t seed,
                                   std::uint64_t offset, Tensor& dx) {
  constexpr const char* op = "dropout_backward";
  CHECK_FLOAT("dy", dy);
  CHECK_LIKE("dx", dx, "dy", dy);
  ops::check_same_shape(op, "dx", dx, "dy", dy);
  check_dropout_p(op, p);
  DeviceGuard guard(ordinal_);
  dispatch_float(op, dy.dtype(), [&]<typename T>() {
    map_unary<T>({op, stream_}, dy, dx,
                 Dropout<T>{seed, offset, p, math::dropout_scale<T>(p), p >= 1.0f});
  });
}

}  // namespace megatron::cuda
