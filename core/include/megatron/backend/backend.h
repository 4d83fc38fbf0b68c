// The compute interface every model runs on: one set of ops, forward and backward, implemented by
// each backend (CPU: OpenBLAS/oneDNN + OpenMP; CUDA: cuBLASLt, CUB, own kernels).
//
// Conventions for every op:
//  - Outputs are preallocated by the caller with the documented shape and dtype; ops never
//    allocate their results. Unless noted, an output may not alias an input.
//  - Shapes are written (B, S, H, D)-style; "rows" means the product of all dimensions but the
//  last.
//    Inputs may be strided views unless an op says "contiguous".
//  - Floating ops accept float32 and float64 (float64 exists for finite-difference gradient checks
//    on CPU); where bf16/fp16 are accepted it says so. Accumulation is at least fp32.
//  - `accumulate` = true adds into the output (gradient accumulation), false overwrites it.
//  - Deterministic: the same inputs, seed and thread count give bitwise-identical outputs; every op
//    except gemm gives the same bits for any thread count.
//  - Bad arguments (shape, dtype, device mismatch) throw megatron::Error naming the op, the
//  argument
//    and the expected and actual values.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "megatron/tensor/tensor.h"

namespace megatron {

enum class GeluApproximation { none, tanh };  // erf form (exact) or Megatron's tanh form

// Attention over logical (B, S, H, D) tensors; any strides with the last dimension contiguous, so
// Megatron's (S, B, H, D) layout is passed as a permuted view without copying.
struct AttentionParams {
  float scale = 0;           // usually 1/sqrt(D)
  bool causal = true;        // query i sees keys j <= i + (Sk - Sq) (bottom-right aligned)
  float dropout_p = 0;       // on the attention probabilities
  std::uint64_t seed = 0;    // dropout stream: element (b, h, i, j) uses Philox index
  std::uint64_t offset = 0;  //   offset + ((b * Hq + h) * Sq + i) * Sk + j, whatever is masked
  // Per-sample key padding (BERT, T5 encoder and cross-attention): (B, Sk) u8 (bool stored as
  // u8), contiguous, on the backend's device; non-zero = key j of sample b is padding and no
  // query of that sample sees it (Megatron's convention, True = masked). Applies together with
  // `causal`. Undefined (the default) = no padding. Backward must get the same mask as forward.
  Tensor key_padding_mask;
  // Per-query first key (GPT's reset_attention_mask, documents packed in one sample): (B, Sq) i32,
  // contiguous, on the backend's device; query i of sample b sees no key j < first_key[b, i].
  // With `causal` this is Megatron's block-diagonal lower-triangular mask in O(S) instead of
  // O(S^2) memory. Undefined (the default) = key 0. Backward must get the same tensor as forward.
  Tensor first_key;
  // Additive score bias shared by the samples (T5's relative position bias): (Hq, Sq, Sk), q's
  // dtype, contiguous, on the backend's device, added after scaling (Megatron-core's
  // post_scale_bias): score = scale * q.k + bias[h, i, j]. Undefined (the default) = none.
  Tensor bias;
};

struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;  // decoupled (AdamW): p -= lr * weight_decay * p
  std::int64_t step = 1;   // 1-based, for bias correction
};

struct SgdParams {
  float lr = 1e-2f;
  float momentum = 0;      // 0: plain SGD, no buffer needed
  float weight_decay = 0;  // added to the gradient (L2), as torch.optim.SGD
  bool nesterov = false;
};

class Backend {
 public:
  virtual ~Backend();

  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  // What runs this backend's kernels, for the start-up log (the CPU's GEMM libraries and their
  // kernels); name() unless a backend says more.
  virtual std::string describe() const { return name(); }
  // Waits for all work queued on this backend (no-op on CPU).
  virtual void synchronize() = 0;

  // ---- memory -------------------------------------------------------------------------------
  Tensor empty(const Shape& shape, DType dtype) const {
    return Tensor::empty(shape, dtype, device());
  }
  // dst = src, same shape; any strides; between host and this device in either direction.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void fill(Tensor& t, double value) = 0;
  // dst = src converted to dst's dtype (any of f32, f64, bf16, f16); same shape.
  virtual void cast(const Tensor& src, Tensor& dst) = 0;
  // Normal(mean, std) / Uniform[low, high) from the Philox stream (seed, offset): element i (in
  // logical row-major order) uses stream index offset + i on every backend.
  virtual void fill_normal(Tensor& t, float mean, float std, std::uint64_t seed,
                           std::uint64_t offset) = 0;
  virtual void fill_uniform(Tensor& t, float low, float high, std::uint64_t seed,
                            std::uint64_t offset) = 0;

  // ---- GEMM ---------------------------------------------------------------------------------
  // c = alpha * op(a) @ op(b) + beta * c, op(x) = x^T when trans_x. 2-D: a (M, K) or (K, M),
  // b (K, N) or (N, K), c (M, N). 3-D: a leading batch dimension on all three (a or b may have
  // batch size 1 to broadcast). a and b: f32, or both bf16, or both f16; c: f32 (or f64 when a
  // and b are f64). Row stride of each matrix may exceed its width (strided views); the last
  // dimension must be contiguous.
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                    float alpha = 1.0f, float beta = 0.0f) = 0;
  // Grouped GEMM over row groups (Mixture of Experts: each expert's tokens): the rows of the
  // row-grouped operands come in groups of group_rows[g] consecutive rows (host values, zero
  // allowed, summing to their row count M), one group per expert g of G = group_rows.size().
  //   !trans_a: c_g = alpha * a_g @ op(b[g]) + beta * c_g; a (M, K) and c (M, N) row-grouped,
  //             b (G, K, N), or (G, N, K) when trans_b (the experts' weights).
  //   trans_a:  c[g] = alpha * a_g^T @ b_g + beta * c[g]; a (M, K) and b (M, N) row-grouped,
  //             c (G, K, N) (the weights' gradients); trans_b must be false.
  // Dtypes as gemm's. The default runs gemm once per non-empty group (an empty group's c[g] is
  // scaled by beta); a backend overrides it with a library's grouped form where it pays.
  virtual void grouped_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                            const std::vector<std::int64_t>& group_rows, Tensor& c,
                            float alpha = 1.0f, float beta = 0.0f);

  // `t` as a GEMM at `compute` precision (bf16, f16) reads it: its values rounded to that
  // precision. The default casts to `compute`. A backend whose `compute` GEMMs would widen their
  // inputs to f32 anyway (CPUs without AVX512-BF16) returns f32 holding the rounded values: the
  // same products, without a narrow copy that the GEMM widens again. Both operands of one GEMM
  // come back in the same dtype.
  virtual Tensor gemm_operand(const Tensor& t, DType compute);

  // ---- elementwise --------------------------------------------------------------------------
  // y = x + bias, bias (N) broadcast over the rows of x (..., N). y may alias x.
  virtual void bias_add(const Tensor& x, const Tensor& bias, Tensor& y) = 0;
  // dbias (N) (+)= sum over rows of dy (..., N).
  virtual void bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate) = 0;
  // y = a + b (same shapes). y may alias a or b.
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;
  // x *= alpha, in place.
  virtual void scale(Tensor& x, double alpha) = 0;
  // y += alpha * x.
  virtual void axpy(double alpha, const Tensor& x, Tensor& y) = 0;
  // Per-row scaling (Mixture of Experts: each expert output by its routing weight):
  // y[m, :] = x[m, :] * scales[m]; x, y (M, N) with contiguous rows, scales (M), one float dtype
  // (f32 or f64). y may alias x.
  virtual void scale_rows(const Tensor& x, const Tensor& scales, Tensor& y) = 0;
  // Per-row dot products (the routing weights' gradient): out[m] = sum_j a[m, j] * b[m, j] in
  // the dtype's precision, summed in index order; a, b (M, N), out (M), one float dtype.
  virtual void row_dots(const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // ---- normalisation (over the last dimension) ----------------------------------------------
  // y = (x - mean) * rstd * weight + bias; x, y (..., N); weight, bias (N) (bias may be null);
  // mean, rstd (rows) are saved for backward, f32 (f64 for f64 x).
  virtual void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                 float eps, Tensor& y, Tensor& mean, Tensor& rstd) = 0;
  // dx (+)= ... (dx overwritten); dweight, dbias (+)= per `accumulate_params`. dbias may be null.
  virtual void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                  const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                  Tensor& dweight, Tensor* dbias, bool accumulate_params) = 0;
  // y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) saved (rows).
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                               Tensor& rstd) = 0;
  virtual void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                const Tensor& rstd, Tensor& dx, Tensor& dweight,
                                bool accumulate_params) = 0;

  // ---- activations --------------------------------------------------------------------------
  virtual void gelu_forward(const Tensor& x, Tensor& y, GeluApproximation approx) = 0;
  // dx = dy * gelu'(x).
  virtual void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx,
                             GeluApproximation approx) = 0;
  // y = tanh(x) (BERT's pooler). y may alias x.
  virtual void tanh_forward(const Tensor& x, Tensor& y) = 0;
  // dx = dy * (1 - y^2), from forward's output y.
  virtual void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) = 0;
  // Megatron's SwiGLU: x (..., 2F) = [gate | up] halves of the last dim; y (..., F) =
  // silu(gate) * up.
  virtual void swiglu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) = 0;

  // ---- softmax ------------------------------------------------------------------------------
  // y = softmax(scale * x + mask) over the last dim; x, y (B, H, Sq, Sk). Masked positions get
  // probability 0: causal masks j > i + (Sk - Sq); `mask` (B or 1, 1, Sq, Sk) u8, non-zero =
  // masked (Megatron's convention), may be null. Fully masked rows give all zeros.
  virtual void softmax_forward(const Tensor& x, const Tensor* mask, float scale, bool causal,
                               Tensor& y) = 0;
  // dx = scale * y * (dy - sum(dy * y)) over the last dim.
  virtual void softmax_backward(const Tensor& dy, const Tensor& y, float scale, Tensor& dx) = 0;

  // ---- attention (computed tile by tile; never materialises Sq x Sk) -----------------------
  // q (B, Sq, Hq, D), k and v (B, Sk, Hkv, D) with Hq % Hkv == 0 (query head h reads kv head
  // h / (Hq / Hkv)); out (B, Sq, Hq, D); lse (B, Hq, Sq) f32 (f64 for f64 inputs) = log-sum-exp
  // of the scaled scores of the keys a query sees, saved for backward. A query that sees no key
  // (all excluded by causality, key_padding_mask and/or first_key) gets a zero output row and
  // lse = -inf,
  // and in backward a zero dq row and no share of dk, dv.
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionParams& params, Tensor& out, Tensor& lse) = 0;
  // dq, dk, dv overwritten; same shapes as q, k, v. With `dbias` (only with params.bias; its
  // shape, dtype and device, contiguous): overwritten with the bias's gradient summed over the
  // batch, deterministically.
  virtual void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionParams& params, Tensor& dq, Tensor& dk, Tensor& dv,
                                  Tensor* dbias = nullptr) = 0;

  // Online-softmax merge (ring attention): out (B, S, H, D) and lse (B, H, S) hold attention of
  // some queries over one set of keys, part_out and part_lse the same queries over another set;
  // afterwards out and lse hold attention over both: lse' = log(exp(lse) + exp(part_lse)),
  // out' = out exp(lse - lse') + part_out exp(part_lse - lse'). A row with lse -inf (no key seen)
  // takes the part's; a part row with -inf changes nothing. One float dtype (f32, f64); any
  // strides with the last dimension of out and part_out contiguous.
  virtual void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out,
                               const Tensor& part_lse) = 0;

  // ---- rotary position embedding ------------------------------------------------------------
  // x, y (B, S, H, D); cos, sin (S, R) with R <= D even: the first R features of each head are
  // rotated in Megatron's non-interleaved ("rotate half") form, the rest pass through:
  //   y[:R/2] = x[:R/2] * cos[:R/2] - x[R/2:R] * sin[:R/2]
  //   y[R/2:R] = x[R/2:R] * cos[R/2:] + x[:R/2] * sin[R/2:]
  // y may alias x.
  virtual void rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) = 0;
  virtual void rotary_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin,
                               Tensor& dx) = 0;

  // ---- embedding ----------------------------------------------------------------------------
  // out (N, H) = table[ids - vocab_start]; ids (N) i32 or i64; table (V, H). Ids outside
  // [vocab_start, vocab_start + V) give zero rows (vocabulary-parallel shards).
  virtual void embedding_forward(const Tensor& ids, const Tensor& table, std::int64_t vocab_start,
                                 Tensor& out) = 0;
  // dtable (+)= scatter-add of dout rows; deterministic (no atomics order dependence).
  virtual void embedding_backward(const Tensor& ids, const Tensor& dout, std::int64_t vocab_start,
                                  Tensor& dtable, bool accumulate) = 0;

  // ---- softmax cross-entropy fused with the logits --------------------------------------------
  // Split in the steps a vocabulary-parallel version combines across shards with all-reduces:
  //  1. row_max (N) = max over the shard's logits (N, V) (f32 or bf16 logits; f64 allowed).
  virtual void cross_entropy_max(const Tensor& logits, Tensor& row_max) = 0;
  //  2. with the global max: sum_exp (N) = sum exp(logit - max) over the shard; target_logit (N)
  //     = logit[target - vocab_start] if the target is in this shard, else 0. targets i32/i64.
  virtual void cross_entropy_sums(const Tensor& logits, const Tensor& targets,
                                  std::int64_t vocab_start, const Tensor& row_max, Tensor& sum_exp,
                                  Tensor& target_logit) = 0;
  //  3. loss (N) = log(sum_exp) + max - target_logit (global sums after all-reduce).
  virtual void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp,
                                  const Tensor& target_logit, Tensor& loss) = 0;
  //  Prediction (evaluation): argmax (N) i64 = vocab_start + the first index of the row whose
  //  logit equals row_max (the global max after the all-reduce), or INT64_MAX when none does (the
  //  max is in another shard), so a MIN all-reduce gives the full vocabulary's first argmax, as
  //  torch.argmax over gathered logits does.
  virtual void cross_entropy_argmax(const Tensor& logits, const Tensor& row_max,
                                    std::int64_t vocab_start, Tensor& argmax) = 0;
  //  4. dlogits = (softmax - onehot(target)) * dloss per row; dloss (N). dlogits may alias logits.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      std::int64_t vocab_start, const Tensor& row_max,
                                      const Tensor& sum_exp, const Tensor& dloss,
                                      Tensor& dlogits) = 0;

  // ---- Mamba-2 (state-space models) ---------------------------------------------------------
  // Causal depthwise conv1d with bias, then SiLU (Mamba's short convolution over x, B, C): x, y
  // (Bt, S, C) any strides with the last dimension contiguous (Megatron's (S, Bt, C) activations
  // are passed as permuted views); weight (C, K) and bias (C) contiguous, x's dtype.
  //   y[b, t, c] = silu(bias[c] + sum_k weight[c, k] * x[b, t - (K - 1) + k, c]), x[b, t < 0] = 0
  virtual void causal_conv1d_silu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          Tensor& y) = 0;
  // dx (shaped as x, any strides, last dimension contiguous) overwritten; dweight, dbias (+)= per
  // `accumulate_params`. The pre-activation is recomputed from x (nothing else is saved).
  virtual void causal_conv1d_silu_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                           const Tensor& bias, Tensor& dx, Tensor& dweight,
                                           Tensor& dbias, bool accumulate_params) = 0;

  // The Mamba-2 SSD scan (state-space duality), chunked: per chunk of `chunk_size` tokens an
  // intra-chunk quadratic form plus the state carried in from the previous chunks, so time is
  // linear in S and what backward keeps is one state per chunk, not per token. Per sample b and
  // head h (group g = h / (H / G)), with dt_t = softplus(dt[b, t, h] + dt_bias[h]) and
  // A = -exp(A_log[h]), it equals the recurrence
  //   state_t = exp(dt_t A) state_{t-1} + dt_t x_t B_t[g]^T      (P x N, state_{-1} = 0)
  //   y_t     = state_t C_t[g] + D[h] x_t
  // x, y (Bt, S, H, P); dt (Bt, S, H) before dt_bias and softplus; B, C (Bt, S, G, N); A_log, D,
  // dt_bias (H); all of one float dtype, any strides with the last dimension contiguous (views
  // into Megatron's fused in_proj output), parameters contiguous. `chunk_states` (Bt, chunks, H,
  // P, N), chunks = ceil(S / chunk_size), contiguous: the state entering each chunk, written by
  // forward and read by backward.
  struct SsdScan {
    Tensor x, dt, B, C, A_log, D, dt_bias;
    std::int64_t chunk_size = 128;
  };
  virtual void ssd_scan_forward(const SsdScan& scan, Tensor& y, Tensor& chunk_states) = 0;
  // The same recurrence token by token from a given state, for incremental decoding: `scan` as
  // above (chunk_size unused), `state` (Bt, H, P, N) contiguous, of x's dtype, the state before
  // the first token, overwritten by the state after the last; y as x. Accumulates in f32 (f64).
  virtual void ssd_scan_recurrent(const SsdScan& scan, Tensor& state, Tensor& y) = 0;
  // Gradients of sum(dy * y): dx, ddt (of the raw dt), dB, dC shaped as their inputs (any
  // strides, last dimension contiguous) are overwritten; dA_log, dD, ddt_bias (H) (+)= per
  // `accumulate_params`. Deterministic for any thread count.
  struct SsdScanGrads {
    Tensor dx, ddt, dB, dC, dA_log, dD, ddt_bias;
  };
  virtual void ssd_scan_backward(const Tensor& dy, const SsdScan& scan, const Tensor& chunk_states,
                                 SsdScanGrads& grads, bool accumulate_params) = 0;

  // Mamba-2's gated RMSNorm (mamba_ssm's RMSNormGated, norm_before_gate = False):
  //   u = x * silu(z);  y = u * rstd_g * weight,  rstd_g = 1 / sqrt(mean(u^2 over group g) + eps)
  // over groups of `group_size` consecutive features. x, z, y (rows, N) with N % group_size == 0,
  // any row stride, last dimension contiguous; weight (N); rstd (rows, N / group_size) contiguous,
  // saved for backward (f32, f64 for f64 x).
  virtual void gated_rmsnorm_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                                     std::int64_t group_size, float eps, Tensor& y,
                                     Tensor& rstd) = 0;
  // dx, dz (shaped as x) overwritten; dweight (+)= per `accumulate_params`.
  virtual void gated_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& z,
                                      const Tensor& weight, std::int64_t group_size,
                                      const Tensor& rstd, Tensor& dx, Tensor& dz, Tensor& dweight,
                                      bool accumulate_params) = 0;

  // ---- dropout (mask regenerated from the seed in backward; nothing stored)
  // ---------------------- y = x * keep / (1 - p), keep = philox_uniform_at(seed, offset, i) >= p
  // for logical element i.
  virtual void dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset,
                               Tensor& y) = 0;
  virtual void dropout_backward(const Tensor& dy, float p, std::uint64_t seed, std::uint64_t offset,
                                Tensor& dx) = 0;

  // ---- reductions and optimizer steps --------------------------------------------------------
  // sqrt(sum of squares over all tensors), accumulated in f64 in a fixed order (for clipping).
  virtual double l2_norm(std::span<const Tensor* const> tensors) = 0;
  // AdamW on fp32 master weights; grad f32 (or f64 with all f64); state tensors same shape.
  virtual void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                          const AdamParams& params) = 0;
  // SGD with optional momentum; momentum_buf may be null when momentum == 0. Zero the buffer
  // before the first step: buf = momentum * 0 + grad is torch's first-step buf = grad exactly.
  virtual void sgd_step(Tensor& param, const Tensor& grad, Tensor* momentum_buf,
                        const SgdParams& params) = 0;
};

// The backend for a device: CPU always; CUDA when compiled in and a device is usable (else throws
// Error saying why). Backends are created on first use and live until exit.
Backend& backend_for(Device device);
// Whether backend_for(cuda) can succeed on this machine (compiled in and a device present).
bool cuda_backend_available();

// Compute threads for CPU kernels and BLAS: n > 0 sets it, 0 restores OMP_NUM_THREADS or all cores.
void set_compute_threads(int n);
int compute_threads();

}  // namespace megatron
