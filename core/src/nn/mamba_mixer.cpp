// The Mamba-2 mixer's declaration (Megatron's initialisation and tensor-parallel split) and its
// forward and backward through the backend's conv1d, SSD scan and gated RMSNorm ops.
#include "megatron/nn/mamba_mixer.h"

#include <cmath>

#include "megatron/error.h"

namespace megatron::nn {

namespace {

void require_divisible(std::int64_t value, const std::string& what, std::int64_t by,
                       const std::string& by_what, const std::string& why) {
  if (value % by != 0) {
    throw ConfigError(what + " (" + std::to_string(value) + ") must be divisible by " + by_what +
                      " (" + std::to_string(by) + ")" + why);
  }
}

}  // namespace

void MambaMixer::declare(ParamFactory& factory, const std::string& prefix,
                         const TransformerConfig& config) {
  config_ = config;
  tp_ = factory.tp;
  const std::int64_t h = config.hidden_size, P = config.mamba_head_dim;
  if (config.mamba_num_heads == 0) {
    require_divisible(config.mamba_expand * h, "d_inner = 2 x hidden_size", P, "mamba_head_dim",
                      ": the mixer's channels are heads of mamba_head_dim");
  }
  const std::int64_t H = config.mamba_heads(), G = config.mamba_num_groups;
  const std::int64_t N = config.mamba_state_dim, di = H * P, t = tp_.size;
  require_divisible(H, "the Mamba heads (d_inner / mamba_head_dim)", G, "mamba_num_groups",
                    ": each group's B and C serve whole heads");
  require_divisible(H, "the Mamba heads (d_inner / mamba_head_dim)", t,
                    "tensor_model_parallel_size",
                    ": each tensor-parallel rank computes whole heads");
  require_divisible(G, "mamba_num_groups", t, "tensor_model_parallel_size",
                    ": each tensor-parallel rank holds whole groups of B and C");
  heads_ = H / t;
  groups_ = G / t;
  state_ = N;
  head_dim_ = P;
  d_inner_ = di / t;

  // Megatron's order and initialisation (MambaMixer.__init__, mamba_block._init_weights).
  in_proj = Linear::declare_column_blocks(factory, prefix + ".in_proj", h,
                                          {di, di, G * N, G * N, H}, false, config.init_method_std);
  const std::vector<std::int64_t> conv_blocks{di, G * N, G * N};
  const std::int64_t K = config.mamba_conv_kernel, channels = di + 2 * G * N;
  const Split conv_split{0, 3, conv_blocks};
  // nn.Conv1d's weight after kaiming_uniform(a = sqrt(5)) and its default bias are both
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = kernel (depthwise: one input channel).
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(K)));
  conv_weight = &factory.declare(prefix + ".conv1d.weight", {channels, 1, K}, ParamInit::uniform, 0,
                                 true, conv_split);
  conv_bias = &factory.declare(prefix + ".conv1d.bias", {channels}, ParamInit::uniform, 0, false,
                               conv_split);
  for (Parameter* p : {conv_weight, conv_bias}) {
    p->init_low = -bound;
    p->init_high = bound;
  }
  dt_bias = &factory.declare(prefix + ".dt_bias", {H}, ParamInit::inverse_softplus_log_uniform, 0,
                             false, Split{0});
  dt_bias->init_low = 0.001f;  // dt_min
  dt_bias->init_high = 0.1f;   // dt_max
  dt_bias->init_floor = 1e-4f;
  A_log = &factory.declare(prefix + ".A_log", {H}, ParamInit::log_uniform, 0, false, Split{0});
  A_log->init_low = 1;  // A_init_range
  A_log->init_high = 16;
  D = &factory.declare(prefix + ".D", {H}, ParamInit::ones, 0, false, Split{0});
  norm_weight =
      &factory.declare(prefix + ".norm.weight", {di}, ParamInit::ones, 0, false, Split{0});
  // _init_weights' rescale_prenorm_residual: N(0, init_method_std / sqrt(num_layers)).
  out_proj = Linear::declare(factory, prefix + ".out_proj", di, h, false,
                             static_cast<float>(config.init_method_std /
                                                std::sqrt(static_cast<double>(config.num_layers))),
                             TensorParallel::row);
}

void MambaMixer::forward(const LayerContext& ctx, const Tensor& x, std::int64_t batch, Tensor& out,
                         Saved& saved) const {
  Backend& be = ctx.backend;
  const DType dt = x.dtype();
  const std::int64_t rows = tp_full_rows(tp_, x.size(0)), seq = rows / batch;
  const std::int64_t width = in_proj_width(), conv = conv_width();
  const std::int64_t chunks = (seq + config_.mamba_chunk_size - 1) / config_.mamba_chunk_size;
  saved.in = x;
  saved.zxbcdt = be.empty({seq, batch, width}, dt);
  Tensor zxbcdt_rows = saved.zxbcdt.view({rows, width});
  in_proj.forward(be, x, zxbcdt_rows, ctx.compute);

  const Tensor xbc_in = saved.zxbcdt.slice(2, d_inner_, conv).permute({1, 0, 2});
  saved.conv = be.empty({seq, batch, conv}, dt);
  Tensor conv_out = saved.conv.permute({1, 0, 2});
  const Tensor weight = conv_weight->value.view({conv, config_.mamba_conv_kernel});
  be.causal_conv1d_silu_forward(xbc_in, weight, conv_bias->value, conv_out);

  saved.y = be.empty({seq, batch, heads_, head_dim_}, dt);
  saved.states = be.empty({batch, chunks, heads_, head_dim_, state_}, dt);
  Tensor y = saved.y.permute({1, 0, 2, 3});
  be.ssd_scan_forward(scan_operands(saved.conv.permute({1, 0, 2}), saved.zxbcdt), y, saved.states);

  saved.normed = be.empty({rows, d_inner_}, dt);
  saved.norm_rstd = be.empty({rows, groups_}, dt);
  be.gated_rmsnorm_forward(saved.y.view({rows, d_inner_}), zxbcdt_rows.slice(1, 0, d_inner_),
                           norm_weight->value, d_inner_ / groups_, kNormEps, saved.normed,
                           saved.norm_rstd);
  out_proj.forward(be, saved.normed, out, ctx.compute);
}

MambaMixer::DecodeState MambaMixer::start_decoding(Backend& be, std::int64_t batch,
                                                   DType dtype) const {
  DecodeState state;
  state.conv_window = be.empty({batch, config_.mamba_conv_kernel - 1, conv_width()}, dtype);
  state.ssm = be.empty({batch, heads_, head_dim_, state_}, dtype);
  be.fill(state.conv_window, 0.0);
  be.fill(state.ssm, 0.0);
  return state;
}

void MambaMixer::forward_decoding(const LayerContext& ctx, const Tensor& x, std::int64_t batch,
                                  DecodeState& state, Tensor& out) const {
  if (tp_.sp()) throw Error("Mamba: incremental decoding without sequence parallelism");
  Backend& be = ctx.backend;
  const DType dt = x.dtype();
  const std::int64_t rows = x.size(0), seq = rows / batch, width = in_proj_width();
  const std::int64_t conv = conv_width(), window = config_.mamba_conv_kernel - 1;
  Tensor zxbcdt = be.empty({seq, batch, width}, dt);
  Tensor zxbcdt_rows = zxbcdt.view({rows, width});
  in_proj.forward(be, x, zxbcdt_rows, ctx.compute);

  // The conv over the window of earlier inputs followed by the new ones; its last `seq` outputs
  // are the new tokens' (the window's own outputs are dropped), and the window moves on.
  Tensor inputs = be.empty({batch, window + seq, conv}, dt);
  Tensor earlier = inputs.slice(1, 0, window), fresh = inputs.slice(1, window, seq);
  be.copy(state.conv_window, earlier);
  be.copy(zxbcdt.slice(2, d_inner_, conv).permute({1, 0, 2}), fresh);
  Tensor conv_all = be.empty({batch, window + seq, conv}, dt);
  be.causal_conv1d_silu_forward(inputs, conv_weight->value.view({conv, config_.mamba_conv_kernel}),
                                conv_bias->value, conv_all);
  be.copy(inputs.slice(1, seq, window), state.conv_window);

  const Backend::SsdScan scan = scan_operands(conv_all.slice(1, window, seq), zxbcdt);
  Tensor y = be.empty({seq, batch, heads_, head_dim_}, dt);
  Tensor y_bs = y.permute({1, 0, 2, 3});
  be.ssd_scan_recurrent(scan, state.ssm, y_bs);

  Tensor normed = be.empty({rows, d_inner_}, dt);
  Tensor rstd = be.empty({rows, groups_}, dt);
  be.gated_rmsnorm_forward(y.view({rows, d_inner_}), zxbcdt_rows.slice(1, 0, d_inner_),
                           norm_weight->value, d_inner_ / groups_, kNormEps, normed, rstd);
  out_proj.forward(be, normed, out, ctx.compute);
}

Backend::SsdScan MambaMixer::scan_operands(const Tensor& conv, const Tensor& zxbcdt) const {
  const std::int64_t bc = groups_ * state_;
  Backend::SsdScan scan;
  scan.x = conv.slice(2, 0, d_inner_).unflatten(2, heads_, head_dim_);
  scan.B = conv.slice(2, d_inner_, bc).unflatten(2, groups_, state_);
  scan.C = conv.slice(2, d_inner_ + bc, bc).unflatten(2, groups_, state_);
  scan.dt = zxbcdt.slice(2, d_inner_ + conv_width(), heads_).permute({1, 0, 2});
  scan.A_log = A_log->value;
  scan.D = D->value;
  scan.dt_bias = dt_bias->value;
  scan.chunk_size = config_.mamba_chunk_size;
  return scan;
}

void MambaMixer::backward(const LayerContext& ctx, const Tensor& dout, Saved& saved,
                          Tensor& dx) const {
  if (!saved.zxbcdt.defined()) throw Error("MambaMixer::backward without a saved forward");
  Backend& be = ctx.backend;
  const DType dt = dout.dtype();
  const std::int64_t seq = saved.zxbcdt.size(0), batch = saved.zxbcdt.size(1);
  const std::int64_t rows = seq * batch, width = in_proj_width(), conv = conv_width();
  const std::int64_t bc = groups_ * state_;

  Tensor dnormed = be.empty({rows, d_inner_}, dt);
  out_proj.backward(be, saved.normed, dout, &dnormed, ctx.compute);

  // d(in_proj output): z by the norm, x/B/C by the convolution, dt by the scan.
  Tensor dzxbcdt = be.empty({seq, batch, width}, dt);
  Tensor dzxbcdt_rows = dzxbcdt.view({rows, width});
  Tensor dz = dzxbcdt_rows.slice(1, 0, d_inner_);
  Tensor dy = be.empty({seq, batch, heads_, head_dim_}, dt);
  Tensor dy_rows = dy.view({rows, d_inner_});
  be.gated_rmsnorm_backward(dnormed, saved.y.view({rows, d_inner_}),
                            saved.zxbcdt.view({rows, width}).slice(1, 0, d_inner_),
                            norm_weight->value, d_inner_ / groups_, saved.norm_rstd, dy_rows, dz,
                            norm_weight->grad, true);

  Tensor dconv = be.empty({seq, batch, conv}, dt);
  const Tensor dconv_bsc = dconv.permute({1, 0, 2});
  Backend::SsdScanGrads grads;
  grads.dx = dconv_bsc.slice(2, 0, d_inner_).unflatten(2, heads_, head_dim_);
  grads.dB = dconv_bsc.slice(2, d_inner_, bc).unflatten(2, groups_, state_);
  grads.dC = dconv_bsc.slice(2, d_inner_ + bc, bc).unflatten(2, groups_, state_);
  grads.ddt = dzxbcdt.slice(2, d_inner_ + conv, heads_).permute({1, 0, 2});
  grads.dA_log = A_log->grad;
  grads.dD = D->grad;
  grads.ddt_bias = dt_bias->grad;
  be.ssd_scan_backward(dy.permute({1, 0, 2, 3}),
                       scan_operands(saved.conv.permute({1, 0, 2}), saved.zxbcdt), saved.states,
                       grads, true);

  Tensor dxbc = dzxbcdt.slice(2, d_inner_, conv).permute({1, 0, 2});
  Tensor dweight = conv_weight->grad.view({conv, config_.mamba_conv_kernel});
  be.causal_conv1d_silu_backward(dconv_bsc,
                                 saved.zxbcdt.slice(2, d_inner_, conv).permute({1, 0, 2}),
                                 conv_weight->value.view({conv, config_.mamba_conv_kernel}),
                                 conv_bias->value, dxbc, dweight, conv_bias->grad, true);

  in_proj.backward(be, saved.in, dzxbcdt_rows, &dx, ctx.compute);
  saved = {};
}

}  // namespace megatron::nn
