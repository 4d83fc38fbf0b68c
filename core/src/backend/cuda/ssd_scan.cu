// CUDA Mamba-2 SSD scan, forward and backward, as the plain recurrence (no intra-chunk quadratic
// form): warps run it along time with the P x N state spread over their lanes; every sum over
// threads, heads or samples is in a fixed order, so results do not vary from run to run.
//
// Backward, per sample and head, with a_t = dt_t A and G_t = dL/dstate_t (including the future):
//   G_t = dy_t C_t^T + exp(a_{t+1}) G_{t+1}
//   dx_t = dt_t G_t B_t + D dy_t,  dB_t = dt_t G_t^T x_t,  dC_t = state_t^T dy_t
//   d(dt_t) = x_t^T G_t B_t + A da_t,  da_t = exp(a_t) <G_t, state_{t-1}>
// G runs backwards and the states forwards, so each chunk's states are recomputed from
// chunk_states while G walks back through it. da_t is taken in this direct form, not as the
// reverse cumulative sum of <dy_t, state_t C_t> - dt_t x_t^T G_t B_t that needs no states: that
// difference cancels where exp(a_t) is small (a token that resets the state), and its rounding
// error would then be carried into every earlier da_t.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/elementwise_math.h"
#include "backend/op_argument_checks.h"

namespace megatron::cuda {

namespace {

constexpr int kScanWarps = 8;  // state rows per block in forward; rows are dealt to warps
constexpr int kScanThreads = 32 * kScanWarps;

// A (Bt, S, H or G, D) view: strides of the first three dimensions; the last is contiguous.
template <typename T>
struct View4 {
  T* data;
  std::int64_t batch_stride, seq_stride, head_stride;
  __device__ T* row(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return data + b * batch_stride + t * seq_stride + h * head_stride;
  }
};

// A (Bt, S, H) view (dt, ddt) with a contiguous last dimension.
template <typename T>
struct View3 {
  T* data;
  std::int64_t batch_stride, seq_stride;
  __device__ T& at(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return data[b * batch_stride + t * seq_stride + h];
  }
};

template <typename T>
View4<T> view4(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2)};
}
template <typename T>
View3<T> view3(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1)};
}

template <typename T>
struct ScanInputs {
  View4<const T> x, B, C;
  View3<const T> dt;
  const T* A_log;
  const T* D;
  const T* dt_bias;
  std::int64_t batch, seq, heads, groups, head_dim, state, chunk_size, chunks;

  __device__ std::int64_t group_of(std::int64_t h) const { return h / (heads / groups); }
  // Index of chunk_states[b, c, h, 0, 0].
  __device__ std::int64_t chunk_state_offset(std::int64_t b, std::int64_t c, std::int64_t h) const {
    return ((b * chunks + c) * heads + h) * head_dim * state;
  }
};

template <typename T>
ScanInputs<T> scan_inputs(const Backend::SsdScan& s) {
  const std::int64_t seq = s.x.size(1);
  return {view4<const T>(s.x),
          view4<const T>(s.B),
          view4<const T>(s.C),
          view3<const T>(s.dt),
          static_cast<const T*>(s.A_log.raw_data()),
          static_cast<const T*>(s.D.raw_data()),
          static_cast<const T*>(s.dt_bias.raw_data()),
          s.x.size(0),
          seq,
          s.x.size(2),
          s.B.size(2),
          s.x.size(3),
          s.B.size(3),
          s.chunk_size,
          (seq + s.chunk_size - 1) / s.chunk_size};
}

// torch.nn.functional.softplus (threshold 20: the identity above it) and its derivative there,
// as mamba_ssm's kernels take it (1 above the threshold, where the forward is the identity).
template <typename T>
__device__ __forceinline__ T softplus(T v) {
  return v > T(20) ? v : std::log1p(math::exp_fast(v));
}
template <typename T>
__device__ __forceinline__ T softplus_grad(T v) {
  return v > T(20) ? T(1) : T(1) / (T(1) + math::exp_fast(-v));
}

// The block's working set: dynamic shared memory, or its own slice of a global buffer when that
// set is too big for shared memory (see place_work).
template <typename T>
__device__ T* block_work(T* global, std::int64_t per_block) {
  extern __shared__ __align__(16) unsigned char ssd_shared[];
  if (global == nullptr) return reinterpret_cast<T*>(ssd_shared);
  const std::int64_t block = blockIdx.y * std::int64_t(gridDim.x) + blockIdx.x;
  return global + block * per_block;
}

// ---- forward ------------------------------------------------------------------------------------
// Grid (b * H + h, row tile); warp w runs state row p = tile * kScanWarps + w along time, lane l
// holding entries n = l, l + 32, ...: row p of the state evolves on its own (B_t, C_t and dt_t
// are shared by the rows), so warps never wait for each other. y_t[p] = state_t[p, :] . C_t +
// D x_t[p] is a warp sum (fixed butterfly). At the first token of each chunk the state entering
// it is stored in chunk_states.
template <typename T>
__global__ void ssd_forward_kernel(ScanInputs<T> s, View4<T> y, T* chunk_states, T* work_global) {
  T* rows = block_work(work_global, kScanWarps * s.state);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.x / s.heads, h = blockIdx.x % s.heads, g = s.group_of(h);
  const std::int64_t p = blockIdx.y * std::int64_t(kScanWarps) + warp;
  if (p >= s.head_dim) return;  // whole warps only; this kernel has no block barrier
  T* st = rows + warp * s.state;
  const T A = -math::exp_fast(s.A_log[h]), d_skip = s.D[h], bias = s.dt_bias[h];
  for (std::int64_t n = lane; n < s.state; n += 32)
    st[n] = T(0);
  for (std::int64_t t = 0; t < s.seq; ++t) {
    if (t % s.chunk_size == 0) {
      T* entering = chunk_states + s.chunk_state_offset(b, t / s.chunk_size, h) + p * s.state;
      for (std::int64_t n = lane; n < s.state; n += 32)
        entering[n] = st[n];
    }
    const T dtv = softplus(s.dt.at(b, t, h) + bias);
    const T decay = math::exp_fast(dtv * A);
    const T xp = s.x.row(b, t, h)[p];
    const T input = dtv * xp;
    const T* b_row = s.B.row(b, t, g);
    const T* c_row = s.C.row(b, t, g);
    T acc = T(0);
    for (std::int64_t n = lane; n < s.state; n += 32) {
      const T v = decay * st[n] + input * b_row[n];
      st[n] = v;
      acc += v * c_row[n];
    }
    acc = warp_sum(acc);
    if (lane == 0) y.row(b, t, h)[p] = acc + d_skip * xp;
  }
}

// ---- backward (1): the reverse sweep ------------------------------------------------------------
// One block per (b, h). Thread (warp w, lane l) owns the state and G entries (p, n) with
// p = w, w + kScanWarps, ... and n = l, l + 32, ...; an entry's state and G depend only on that
// entry, so recomputing states needs no barrier. Chunks go last to first; inside a chunk the
// states are recomputed in sub-chunks of about sqrt(chunk_size) tokens: one forward pass from
// chunk_states stores the state entering each sub-chunk, then, sub-chunk by sub-chunk from the
// last, its states are recomputed (`seg`, state before each token and after the last) and G
// walks back through it. Per token:
//   dx_t[p] = dt_t (G_t B_t)[p] + D dy_t[p]            (warp sum over n)
//   dB_t[n] = dt_t sum_p G_t[p, n] x_t[p],  dC_t[n] = sum_p state_t[p, n] dy_t[p],
//   w_t = x_t^T G_t B_t,  Y_t = <G_t, state_{t-1}>      (each warp's rows, then warps in order)
//   ddt[b, t, h] = (w_t + A exp(a_t) Y_t) * softplus'(dt[b, t, h] + dt_bias)
// The per-warp partials alternate between two buffers, so one barrier per token suffices: a
// buffer is rewritten two tokens later, after every thread has passed the barrier in between.
// The sample's dA (sum dt_t da_t), ddt_bias (sum ddt_t) and dD (sum of dy x, per warp and then
// over warps) are summed in token order and written to sums[(b * H + h) * 3 + {0, 1, 2}].
template <typename T>
__global__ void ssd_backward_kernel(ScanInputs<T> s, View4<const T> dy, const T* chunk_states,
                                    View4<T> dx, View4<T> db_head, View4<T> dc_head, View3<T> ddt,
                                    T* sums, T* work_global, T* states_global,
                                    std::int64_t sub_length, std::int64_t sub_chunks) {
  const std::int64_t P = s.head_dim, N = s.state, PN = P * N;
  const std::int64_t width = 2 * N + 2;  // dB partials, dC partials, w, Y
  T* work = block_work(work_global, PN + 2 * kScanWarps * width);
  T* grad_state = work;     // G
  T* partials = work + PN;  // [buffer][warp][width]
  T* checkpoints = states_global + blockIdx.x * (sub_chunks + sub_length + 1) * PN;
  T* seg = checkpoints + sub_chunks * PN;  // [sub_length + 1][P * N]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.x / s.heads, h = blockIdx.x % s.heads, g = s.group_of(h);
  const T A = -math::exp_fast(s.A_log[h]), d_skip = s.D[h], bias = s.dt_bias[h];
  for (std::int64_t p = warp; p < P; p += kScanWarps)
    for (std::int64_t n = lane; n < N; n += 32)
      grad_state[p * N + n] = T(0);
  // One forward step of this thread's entries, exactly as ssd_forward_kernel takes it.
  const auto step = [&](std::int64_t t, const T* from, T* to) {
    const T dtv = softplus(s.dt.at(b, t, h) + bias);
    const T decay = math::exp_fast(dtv * A);
    const T* x_row = s.x.row(b, t, h);
    const T* b_row = s.B.row(b, t, g);
    for (std::int64_t p = warp; p < P; p += kScanWarps) {
      const T input = dtv * x_row[p];
      for (std::int64_t n = lane; n < N; n += 32)
        to[p * N + n] = decay * from[p * N + n] + input * b_row[n];
    }
  };
  const auto copy_own = [&](const T* from, T* to) {
    for (std::int64_t p = warp; p < P; p += kScanWarps)
      for (std::int64_t n = lane; n < N; n += 32)
        to[p * N + n] = from[p * N + n];
  };
  T next_decay = T(0);  // exp(a_{t+1}); G_S = 0, so its value at t = S - 1 does not matter
  T dd = T(0), da_sum = T(0), dbias_sum = T(0);
  int buffer = 0;
  for (std::int64_t c = s.chunks - 1; c >= 0; --c) {
    const std::int64_t start = c * s.chunk_size, end = min(s.seq, start + s.chunk_size);
    const std::int64_t subs = (end - start + sub_length - 1) / sub_length;
    // The state entering each sub-chunk; seg[0] carries the running state meanwhile.
    copy_own(chunk_states + s.chunk_state_offset(b, c, h), seg);
    for (std::int64_t t = start; t < end; ++t) {
      if ((t - start) % sub_length == 0) copy_own(seg, checkpoints + (t - start) / sub_length * PN);
      step(t, seg, seg);
    }
    for (std::int64_t j = subs - 1; j >= 0; --j) {
      const std::int64_t t0 = start + j * sub_length, t1 = min(end, t0 + sub_length);
      copy_own(checkpoints + j * PN, seg);
      for (std::int64_t t = t0; t < t1; ++t)
        step(t, seg + (t - t0) * PN, seg + (t - t0 + 1) * PN);
      for (std::int64_t t = t1 - 1; t >= t0; --t) {
        const T* before = seg + (t - t0) * PN;  // state_{t-1}
        const T* after = before + PN;           // state_t
        const T raw = s.dt.at(b, t, h) + bias;
        const T dtv = softplus(raw);
        T* part = partials + buffer * kScanWarps * width;
        T* mine = part + warp * width;
        for (std::int64_t n = lane; n < N; n += 32)
          mine[n] = mine[N + n] = T(0);
        const T* b_row = s.B.row(b, t, g);
        const T* c_row = s.C.row(b, t, g);
        const T* x_row = s.x.row(b, t, h);
        const T* dy_row = dy.row(b, t, h);
        T w_sum = T(0), y_sum = T(0);
        for (std::int64_t p = warp; p < P; p += kScanWarps) {
          const T xp = x_row[p], dyp = dy_row[p];
          T gb = T(0);
          for (std::int64_t n = lane; n < N; n += 32) {
            const std::int64_t e = p * N + n;
            const T v = dyp * c_row[n] + next_decay * grad_state[e];
            grad_state[e] = v;
            gb += v * b_row[n];
            y_sum += v * before[e];
            mine[n] += v * xp;
            mine[N + n] += after[e] * dyp;
          }
          gb = warp_sum(gb);
          if (lane == 0) dx.row(b, t, h)[p] = dtv * gb + d_skip * dyp;
          w_sum += xp * gb;
          dd += dyp * xp;
        }
        y_sum = warp_sum(y_sum);
        if (lane == 0) {
          mine[2 * N] = w_sum;
          mine[2 * N + 1] = y_sum;
        }
        __syncthreads();
        for (std::int64_t k = threadIdx.x; k < 2 * N; k += blockDim.x) {
          T sum = T(0);
          for (int q = 0; q < kScanWarps; ++q)
            sum += part[q * width + k];
          if (k < N) {
            db_head.row(b, t, h)[k] = dtv * sum;
          } else {
            dc_head.row(b, t, h)[k - N] = sum;
          }
        }
        const T decay = math::exp_fast(dtv * A);
        if (threadIdx.x == 0) {
          T w = T(0), y = T(0);
          for (int q = 0; q < kScanWarps; ++q) {
            w += part[q * width + 2 * N];
            y += part[q * width + 2 * N + 1];
          }
          const T da = decay * y;
          const T grad = (w + A * da) * softplus_grad(raw);
          ddt.at(b, t, h) = grad;
          da_sum += dtv * da;
          dbias_sum += grad;
        }
        buffer ^= 1;
        next_decay = decay;
      }
    }
  }
  __syncthreads();  // the last token's partials are read; reuse the start of the buffer
  if (lane == 0) partials[warp] = dd;
  __syncthreads();
  if (threadIdx.x == 0) {
    T total = T(0);
    for (int q = 0; q < kScanWarps; ++q)
      total += partials[q];
    T* out = sums + (b * s.heads + h) * 3;
    out[0] = da_sum;
    out[1] = dbias_sum;
    out[2] = total;
  }
}

// ---- backward (2): dB, dC = the per-head gradients summed over each group's heads in order -----
template <typename T>
__global__ void ssd_group_sum_kernel(View4<const T> per_head, std::int64_t batch, std::int64_t seq,
                                     std::int64_t groups, std::int64_t heads_per_group,
                                     std::int64_t n_state, View4<T> out) {
  const std::int64_t total = batch * seq * groups * n_state;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = i % n_state, row = i / n_state;
    const std::int64_t g = row % groups, t = (row / groups) % seq, b = row / (groups * seq);
    T sum = T(0);
    for (std::int64_t k = 0; k < heads_per_group; ++k)
      sum += per_head.row(b, t, g * heads_per_group + k)[n];
    out.row(b, t, g)[n] = sum;
  }
}

// ---- backward (3): parameter gradients = per-sample sums added in sample order -----------------
// dA_log = A * dA (A = -exp(A_log)); added to the old value last when accumulating.
template <typename T>
__global__ void ssd_param_kernel(const T* sums, std::int64_t batch, std::int64_t heads,
                                 const T* a_log, T* da_log, T* ddt_bias, T* d_skip,
                                 bool accumulate) {
  for (std::int64_t h = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; h < heads;
       h += std::int64_t(gridDim.x) * blockDim.x) {
    T da = T(0), dbias = T(0), dd = T(0);
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* in = sums + (b * heads + h) * 3;
      da += in[0];
      dbias += in[1];
      dd += in[2];
    }
    da *= -math::exp_fast(a_log[h]);
    da_log[h] = accumulate ? da_log[h] + da : da;
    ddt_bias[h] = accumulate ? ddt_bias[h] + dbias : dbias;
    d_skip[h] = accumulate ? d_skip[h] + dd : dd;
  }
}

// ---- host side ---------------------------------------------------------------------------------

// Where a kernel's per-block working set lives: dynamic shared memory when it fits (opting the
// kernel in above the default 48 KB when the device allows more), else a global buffer with one
// slice per block (slower, but any head or state size works).
template <typename T>
struct Placement {
  Tensor buffer;           // holds the global slices when used
  T* global = nullptr;     // null: shared memory
  std::size_t shared = 0;  // dynamic shared bytes for the launch
};

template <typename T, typename Kernel>
Placement<T> place_work(const char* op, Kernel* kernel, std::int64_t per_block, std::int64_t blocks,
                        Device device, int ordinal) {
  Placement<T> placement;
  const std::size_t bytes = static_cast<std::size_t>(per_block) * sizeof(T);
  constexpr std::size_t kDefaultShared = 48 * 1024;
  bool fits = bytes <= kDefaultShared;
  if (!fits) {
    int optin = 0;
    check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal),
               op);
    if (bytes <= static_cast<std::size_t>(optin)) {
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)),
                 op);
      fits = true;
    }
  }
  if (fits) {
    placement.shared = bytes;
  } else {
    placement.buffer = Tensor::empty(Shape{blocks * per_block}, dtype_of_v<T>, device);
    placement.global = static_cast<T*>(placement.buffer.raw_data());
  }
  return placement;
}

// Incremental decoding: the recurrence from a given state, one thread per state row (b, h, p)
// walking the new tokens in order; its N entries stay in the thread's own slice of `state`.
template <typename T>
__global__ void ssd_recurrent_kernel(ScanInputs<T> s, View4<T> y, T* state) {
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (row >= s.batch * s.heads * s.head_dim) return;
  const std::int64_t p = row % s.head_dim, bh = row / s.head_dim;
  const std::int64_t h = bh % s.heads, b = bh / s.heads, g = s.group_of(h);
  T* st = state + row * s.state;
  const T A = -math::exp_fast(s.A_log[h]);
  for (std::int64_t t = 0; t < s.seq; ++t) {
    const T step = softplus(s.dt.at(b, t, h) + s.dt_bias[h]);
    const T decay = math::exp_fast(step * A);
    const T xv = s.x.row(b, t, h)[p];
    const T* Bt = s.B.row(b, t, g);
    const T* Ct = s.C.row(b, t, g);
    T acc = 0;
    for (std::int64_t n = 0; n < s.state; ++n) {
      st[n] = decay * st[n] + step * xv * Bt[n];
      acc += st[n] * Ct[n];
    }
    y.row(b, t, h)[p] = acc + s.D[h] * xv;
  }
}

unsigned blocks_for(const char* op, std::int64_t n) {
  if (n > 0x7fffffff) ops::fail(op, "too many blocks for one launch: " + std::to_string(n));
  return static_cast<unsigned>(n);
}

}  // namespace

void CudaBackend::ssd_scan_forward(const SsdScan& scan, Tensor& y, Tensor& chunk_states) {
  constexpr const char* op = "ssd_scan_forward";
  const Device here = device();
  ops::check_ssd_scan_args(op, scan, chunk_states, here);
  // y: as x (the shared check covers the inputs and chunk_states).
  ops::check_float_view(op, "y", y, scan.x, "x", here);
  ops::check_same_shape(op, "y", y, "x", scan.x);
  if (scan.x.numel() == 0) return;  // then chunk_states is empty too
  DeviceGuard guard(ordinal_);
  dispatch_float(op, scan.x.dtype(), [&]<typename T>() {
    const ScanInputs<T> s = scan_inputs<T>(scan);
    const std::int64_t tiles = (s.head_dim + kScanWarps - 1) / kScanWarps;
    const dim3 grid(blocks_for(op, s.batch * s.heads), blocks_for(op, tiles));
    Placement<T> work = place_work<T>(op, ssd_forward_kernel<T>, kScanWarps * s.state,
                                      s.batch * s.heads * tiles, here, ordinal_);
    ssd_forward_kernel<T><<<grid, kScanThreads, work.shared, stream_>>>(
        s, view4<T>(y), static_cast<T*>(chunk_states.raw_data()), work.global);
    check_launch(op);
  });
}

void CudaBackend::ssd_scan_recurrent(const SsdScan& scan, Tensor& state, Tensor& y) {
  constexpr const char* op = "ssd_scan_recurrent";
  const Device here = device();
  ops::check_ssd_scan_operands(op, scan, here);
  ops::check_ssd_state(op, scan, state, here);
  ops::check_float_view(op, "y", y, scan.x, "x", here);
  ops::check_same_shape(op, "y", y, "x", scan.x);
  const std::int64_t rows = scan.x.size(0) * scan.x.size(2) * scan.x.size(3);
  if (rows == 0) return;
  DeviceGuard guard(ordinal_);
  dispatch_float(op, scan.x.dtype(), [&]<typename T>() {
    Backend::SsdScan operands = scan;
    operands.chunk_size = 1;  // unused by the recurrence
    constexpr int threads = 128;
    ssd_recurrent_kernel<T>
        <<<blocks_for(op, (rows + threads - 1) / threads), threads, 0, stream_>>>(
            scan_inputs<T>(operands), view4<T>(y), static_cast<T*>(state.raw_data()));
    check_launch(op);
  });
}

void CudaBackend::ssd_scan_backward(const Tensor& dy, const SsdScan& scan,
                                    const Tensor& chunk_states, SsdScanGrads& grads,
                                    bool accumulate_params) {
  constexpr const char* op = "ssd_scan_backward";
  const Device here = device();
  ops::check_ssd_scan_args(op, scan, chunk_states, here);
  ops::check_ssd_scan_grads(op, dy, scan, grads, here);
  if (scan.x.size(2) == 0) return;  // no heads: every gradient is empty
  DeviceGuard guard(ordinal_);
  dispatch_float(op, scan.x.dtype(), [&]<typename T>() {
    const ScanInputs<T> s = scan_inputs<T>(scan);
    const std::int64_t bh = s.batch * s.heads, heads_per_group = s.heads / s.groups;
    const std::int64_t pn = s.head_dim * s.state;
    const DType dtype = scan.x.dtype();

    // Per-head dB and dC: the outputs themselves when every group has one head.
    Tensor db_scratch, dc_scratch;
    View4<T> db_head = view4<T>(grads.dB), dc_head = view4<T>(grads.dC);
    if (heads_per_group > 1) {
      const Shape per_head{s.batch, s.seq, s.heads, s.state};
      db_scratch = Tensor::empty(per_head, dtype, here);
      dc_scratch = Tensor::empty(per_head, dtype, here);
      db_head = view4<T>(db_scratch);
      dc_head = view4<T>(dc_scratch);
    }
    // Per-sample dA, ddt_bias and dD, (Bt, H, 3).
    Tensor sums = Tensor::empty(Shape{std::max<std::int64_t>(3 * bh, 1)}, dtype, here);
    T* sum_data = static_cast<T*>(sums.raw_data());

    if (bh > 0) {
      // Sub-chunks of about sqrt(tokens per chunk): each block keeps the state entering every
      // sub-chunk plus one sub-chunk's states, (sub_chunks + sub_length + 1) states in all.
      const std::int64_t chunk_tokens = std::min(s.chunk_size, std::max<std::int64_t>(s.seq, 1));
      std::int64_t sub_length = 1;
      while (sub_length * sub_length < chunk_tokens)
        ++sub_length;
      const std::int64_t sub_chunks = (chunk_tokens + sub_length - 1) / sub_length;
      Tensor states = Tensor::empty(
          Shape{std::max<std::int64_t>(bh * (sub_chunks + sub_length + 1) * pn, 1)}, dtype, here);
      Placement<T> work = place_work<T>(
          op, ssd_backward_kernel<T>, pn + 2 * kScanWarps * (2 * s.state + 2), bh, here, ordinal_);
      ssd_backward_kernel<T><<<blocks_for(op, bh), kScanThreads, work.shared, stream_>>>(
          s, view4<const T>(dy), static_cast<const T*>(chunk_states.raw_data()), view4<T>(grads.dx),
          db_head, dc_head, view3<T>(grads.ddt), sum_data, work.global,
          static_cast<T*>(states.raw_data()), sub_length, sub_chunks);
      check_launch(op);
      // dB, dC summed over each group's heads.
      const std::int64_t grouped = s.batch * s.seq * s.groups * s.state;
      if (heads_per_group > 1 && grouped > 0) {
        const auto as_const = [](const View4<T>& v) {
          return View4<const T>{v.data, v.batch_stride, v.seq_stride, v.head_stride};
        };
        ssd_group_sum_kernel<T><<<grid_for(grouped), kThreads, 0, stream_>>>(
            as_const(db_head), s.batch, s.seq, s.groups, heads_per_group, s.state,
            view4<T>(grads.dB));
        check_launch(op);
        ssd_group_sum_kernel<T><<<grid_for(grouped), kThreads, 0, stream_>>>(
            as_const(dc_head), s.batch, s.seq, s.groups, heads_per_group, s.state,
            view4<T>(grads.dC));
        check_launch(op);
      }
    }
    // The parameter gradients, summed over samples in order (zero without samples).
    ssd_param_kernel<T><<<grid_for(s.heads), kThreads, 0, stream_>>>(
        sum_data, s.batch, s.heads, s.A_log, static_cast<T*>(grads.dA_log.raw_data()),
        static_cast<T*>(grads.ddt_bias.raw_data()), static_cast<T*>(grads.dD.raw_data()),
        accumulate_params);
    check_launch(op);
  });
}

}  // namespace megatron::cuda
