// The CPU backend: GEMM through OpenBLAS or oneDNN, everything else OpenMP kernels. Its methods are
// defined across this folder, one file per op family (gemm.cpp, norms.cpp, attention.cpp, ...).
#pragma once

#include "megatron/backend/backend.h"

namespace megatron::cpu {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu"; }
  std::string describe() const override;  // blas_capabilities.cpp
  void synchronize() override {}

  // cpu_backend.cpp
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& t, double value) override;
  void cast(const Tensor& src, Tensor& dst) override;
  void fill_normal(Tensor& t, float mean, float std, std::uint64_t seed,
                   std::uint64_t offset) override;
  void fill_uniform(Tensor& t, float low, float high, std::uint64_t seed,
                    std::uint64_t offset) override;

  // gemm.cpp
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
            float beta) override;
  Tensor gemm_operand(const Tensor& t, DType compute) override;

  // elementwise.cpp
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

  // norms.cpp
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor* bias, float eps,
                         Tensor& y, Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                          const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                          Tensor* dbias, bool accumulate_params) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                       Tensor& rstd) override;
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                        Tensor& dx, Tensor& dweight, bool accumulate_params) override;

  // softmax.cpp
  void softmax_forward(const Tensor& x, const Tensor* mask, float scale, bool causal,
                       Tensor& y) override;
  void softmax_backward(const Tensor& dy, const Tensor& y, float scale, Tensor& dx) override;

  // attention.cpp
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionParams& params, Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const AttentionParams& params,
                          Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dbias = nullptr) override;
  void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out,
                       const Tensor& part_lse) override;

  // rotary.cpp
  void rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override;
  void rotary_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) override;

  // embedding.cpp
  void embedding_forward(const Tensor& ids, const Tensor& table, std::int64_t vocab_start,
                         Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, std::int64_t vocab_start,
                          Tensor& dtable, bool accumulate) override;

  // cross_entropy.cpp
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

  // mamba_conv1d.cpp, ssd_scan.cpp, gated_rmsnorm.cpp
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

  // optimizer.cpp
  double l2_norm(std::span<const Tensor* const> tensors) override;
  void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamParams& params) override;
  void sgd_step(Tensor& param, const Tensor& grad, Tensor* momentum_buf,
                const SgdParams& params) override;
};

}  // namespace megatron::cpu
