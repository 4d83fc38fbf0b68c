// The CUDA backend: the Backend interface on one device, with one compute stream, cuBLASLt for
// GEMM and hand-written kernels elsewhere. Its methods are defined across this folder, one .cu
// file per op family (named in the comments below).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "megatron/backend/backend.h"

namespace megatron::cuda {

// An event for ordering work between streams (e.g. a communication stream waits for the
// gradients the compute stream produced). Timing is disabled: ordering only.
class CudaEvent {
 public:
  explicit CudaEvent(int ordinal);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  // Blocks the host until the recorded work is done.
  void synchronize() const;
  // True when the recorded work is done (or nothing was recorded).
  bool ready() const;

 private:
  int ordinal_;
  cudaEvent_t event_ = nullptr;
};

// cuBLASLt state for gemm.cu: the handle, a workspace, and the chosen algorithm per problem.
struct GemmState;
struct GemmStateDeleter {
  void operator()(GemmState* state) const;  // gemm.cu
};

// cuBLAS state for grouped_gemm.cu: the handle of its grouped GEMM.
struct GroupedGemmState;
struct GroupedGemmStateDeleter {
  void operator()(GroupedGemmState* state) const;  // grouped_gemm.cu
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal);  // throws Error with the CUDA error text
  ~CudaBackend() override;

  Device device() const override { return Device::cuda(ordinal_); }
  std::string name() const override { return device().str(); }
  void synchronize() override;

  // ---- streams and events (for overlapping communication with compute) ----------------------
  // Every op is queued on this stream, in call order.
  cudaStream_t stream() const { return stream_; }
  int ordinal() const { return ordinal_; }
  // Marks the current end of the compute stream in `event`.
  void record_event(CudaEvent& event) { event.record(stream_); }
  // Work queued on the compute stream after this call waits for `event`.
  void wait_event(const CudaEvent& event);
  // Work queued after this call waits for everything queued on `other` so far.
  void wait_stream(cudaStream_t other);

  // Whether f32 GEMMs may use TF32 tensor cores (off by default: results then match the CPU to
  // fp32 round-off; on, they carry about 10 mantissa bits).
  void set_allow_tf32(bool allow) { allow_tf32_ = allow; }
  bool allow_tf32() const { return allow_tf32_; }

  // cuda_backend.cu
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& t, double value) override;
  void cast(const Tensor& src, Tensor& dst) override;
  void fill_normal(Tensor& t, float mean, float std, std::uint64_t seed,
                   std::uint64_t offset) override;
  void fill_uniform(Tensor& t, float low, float high, std::uint64_t seed,
                    std::uint64_t offset) override;

  // gemm.cu
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
            float beta) override;

  // grouped_gemm.cu
  void grouped_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                    const std::vector<std::int64_t>& group_rows, Tensor& c, float alpha,
                    float beta) override;

  // elementwise.cu
  void bias_add(const Tensor& x, const Tensor& bias, Tensor& y) override;
  void bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void scale(Tensor& x, double alpha) override;
  void scale_rows(const Tensor& x, const Tensor& scales, Tensor& y) override;
  void row_dots(const Tensor& a, const Tensor& b, Tensor& out) override;
  void axpy(double alpha, const Tensor& x, Tensor& y) override;
  void gelu_forward(const Tensor& x, Tensor& y, GeluApproximation approx) override;
  void tanh_forward(const Tensor& x, Tensor& y) override;
  void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override;
  void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx,
                     GeluApproximation approx) override;
  void swiglu_forward(const Tensor& x, Tensor& y) override;
  void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) override;
  void dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset,
                       Tensor& y) override;
  void dropout_backward(const Tensor& dy, float p, std::uint64_t seed, std::uint64_t offset,
                        Tensor& dx) override;

  // norms.cu
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor* bias, float eps,
                         Tensor& y, Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                          const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                          Tensor* dbias, bool accumulate_params) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                       Tensor& rstd) override;
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                        Tensor& dx, Tensor& dweight, bool accumulate_params) override;

  // softmax.cu
  void softmax_forward(const Tensor& x, const Tensor* mask, float scale, bool causal,
                       Tensor& y) override;
  void softmax_backward(const Tensor& dy, const Tensor& y, float scale, Tensor& dx) override;

  // attention.cu
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionParams& params, Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const AttentionParams& params,
                          Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dbias = nullptr) override;
  void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out,
                       const Tensor& part_lse) override;

  // rotary.cu
  void rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override;
  void rotary_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) override;

  // embedding.cu
  void embedding_forward(const Tensor& ids, const Tensor& table, std::int64_t vocab_start,
                         Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, std::int64_t vocab_start,
                          Tensor& dtable, bool accumulate) override;

  // cross_entropy.cu
  void cross_entropy_max(const Tensor& logits, Tensor& row_max) override;
  void cross_entropy_sums(const Tensor& logits, const Tensor& targets, std::int64_t vocab_start,
                          const Tensor& row_max, Tensor& sum_exp, Tensor& target_logit) override;
  void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                          Tensor& loss) override;
  void cross_entropy_argmax(const Tensor& logits, const Tensor& row_max, std::int64_t vocab_start,
                            Tensor& argmax) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, std::int64_t vocab_start,
                              const Tensor& row_max, const Tensor& sum_exp, const Tensor& dloss,
                              Tensor& dlogits) override;

  // mamba_conv1d.cu, ssd_scan.cu, gated_rmsnorm.cu
  void causal_conv1d_silu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  Tensor& y) override;
  void causal_conv1d_silu_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& bias, Tensor& dx, Tensor& dweight, Tensor& dbias,
                                   bool accumulate_params) override;
  void ssd_scan_forward(const SsdScan& scan, Tensor& y, Tensor& chunk_states) override;
  void ssd_scan_recurrent(const SsdScan& scan, Tensor& state, Tensor& y) override;
  void ssd_scan_backward(const Tensor& dy, const SsdScan& scan, const Tensor& chunk_states,
                         SsdScanGrads& grads, bool accumulate_params) override;
  void gated_rmsnorm_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                             std::int64_t group_size, float eps, Tensor& y, Tensor& rstd) override;
  void gated_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& z,
                              const Tensor& weight, std::int64_t group_size, const Tensor& rstd,
                              Tensor& dx, Tensor& dz, Tensor& dweight,
                              bool accumulate_params) override;

  // optimizer.cu
  double l2_norm(std::span<const Tensor* const> tensors) override;
  void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamParams& params) override;
  void sgd_step(Tensor& param, const Tensor& grad, Tensor* momentum_buf,
                const SgdParams& params) override;

 private:
  // Checks that `t` lives on this device; the message names the op and the argument.
  void check_here(const char* op, const char* name, const Tensor& t) const;

  int ordinal_;
  cudaStream_t stream_ = nullptr;
  bool allow_tf32_ = false;
  std::unique_ptr<GemmState, GemmStateDeleter> gemm_;                   // created on the first gemm
  std::unique_ptr<GroupedGemmState, GroupedGemmStateDeleter> grouped_;  // on the first grouped
};

}  // namespace megatron::cuda
