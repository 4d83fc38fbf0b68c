// MoeBlock: routing, permutation into expert order, the experts' grouped GEMMs, the weighted
// scatter back to the tokens, shared experts, and the backward of each, as Megatron-core's
// MoELayer (dropless or with capacity) computes them on one rank.
#include "megatron/nn/moe/moe_block.h"

#include <algorithm>

#include "megatron/error.h"
#include "megatron/nn/mixed_gemm.h"
#include "megatron/nn/moe/routing.h"

namespace megatron::nn {

namespace {

// A host vector as a tensor of `dtype` on the backend's device.
template <typename T>
Tensor on_device(Backend& be, const std::vector<T>& values, DType dtype) {
  const Tensor host = Tensor::from(values, {static_cast<std::int64_t>(values.size())});
  Tensor out = be.empty(host.shape(), dtype);
  be.copy(host.dtype() == dtype ? host : host.to(dtype), out);
  return out;
}

// A device tensor's elements in f64 on the host.
std::vector<double> to_host(Backend& be, const Tensor& t) {
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  be.copy(t, host);
  return host.to_vector<double>();
}

}  // namespace

// What one micro-batch's forward keeps for backward.
struct MoeBlock::Run : Mixer::Saved {
  moe::Routing routing;              // host, dense (tokens, experts)
  std::vector<std::int64_t> tokens;  // the permuted rows' tokens, expert-major, token order
  std::vector<std::int64_t> group_rows;
  std::vector<double> aux_grad;  // (tokens, experts): the auxiliary losses' gradient, scaled
  Tensor perm, probs;            // on the device: tokens (i32) and their weights
  Tensor xp, fc1_out, act, out;  // (M, h), (M, fc1), (M, ffn), (M, h)
  Mlp::Saved shared;
  Tensor shared_out;
};

void MoeBlock::declare(ParamFactory& factory, const std::string& prefix,
                       const TransformerConfig& config) {
  config_ = config;
  const MoeConfig& moe = config.moe;
  if (factory.tp.split()) {
    throw ConfigError(
        "num_experts: Mixture of Experts runs on one tensor-parallel rank for now "
        "(tensor_model_parallel_size 1)");
  }
  const std::int64_t e = moe.num_experts, h = config.hidden_size, f = moe.ffn_hidden_size;
  router = Linear::declare(factory, prefix + ".router", h, e, false, config.init_method_std);
  const std::int64_t fc1_width = config.swiglu ? 2 * f : f;
  fc1 = &factory.declare(prefix + ".experts.linear_fc1.weight", {e, fc1_width, h},
                         ParamInit::normal, config.init_method_std);
  fc2 = &factory.declare(prefix + ".experts.linear_fc2.weight", {e, h, f}, ParamInit::normal,
                         config.output_init_std());
  for (Parameter* p : {fc1, fc2}) {
    p->experts = e;
    p->experts_per_token = moe.routing.topk;
  }
  if (moe.shared_expert_ffn > 0) {
    TransformerConfig shared = config;
    shared.ffn_hidden_size = moe.shared_expert_ffn;
    shared_experts.declare(factory, prefix + ".shared_experts", shared);
  }
}

void MoeBlock::route_rows(const LayerContext& ctx, const Tensor& x_rows, std::int64_t sequences,
                          Run& run) const {
  Backend& be = ctx.backend;
  const MoeConfig& moe = config_.moe;
  const std::int64_t t = x_rows.size(0), e = moe.num_experts;
  Tensor logits = be.empty({t, e}, x_rows.dtype());
  router.forward(be, x_rows, logits, ctx.compute);
  const std::vector<double> l = to_host(be, logits);
  run.routing = moe::route(moe.routing, l.data(), t);
  if (moe.capacity_factor > 0) {
    moe::drop_over_capacity(run.routing, moe.routing.topk, moe.capacity_factor, moe.drop_policy,
                            moe.pad_to_capacity);
  }
  // Megatron adds the auxiliary losses in training only; their gradients are of loss_scale x
  // the loss (MoEAuxLossAutoScaler's main_loss_backward_scale).
  if (!ctx.training) return;
  run.aux_grad.assign(static_cast<std::size_t>(t * e), 0.0);
  if (moe.z_loss_coeff > 0) {
    const double z =
        moe::z_loss(l.data(), t, e, moe.z_loss_coeff, ctx.loss_scale, run.aux_grad.data());
    if (ctx.aux_losses) ctx.aux_losses->add("z_loss", z / moe.z_loss_coeff);
  }
  if (moe.load_balancing != LoadBalancing::none && moe.aux_loss_coeff > 0) {
    // aux_loss: the micro-batch's tokens; seq_aux_loss: each sequence's (rows s * B + b).
    const std::int64_t groups = moe.load_balancing == LoadBalancing::seq_aux_loss ? sequences : 1;
    const std::vector<double> counts = moe::aux_tokens_per_expert(moe.routing, l.data(), t, groups);
    const double loss = moe::load_balancing_loss(
        moe.routing, l.data(), t, groups, counts, static_cast<double>(t / groups),
        moe.aux_loss_coeff, ctx.loss_scale, run.aux_grad.data());
    const char* name = moe.load_balancing == LoadBalancing::seq_aux_loss ? "seq_load_balancing_loss"
                                                                         : "load_balancing_loss";
    if (ctx.aux_losses) ctx.aux_losses->add(name, loss / moe.aux_loss_coeff);
  }
}

std::unique_ptr<Mixer::Saved> MoeBlock::forward(const LayerContext& ctx, const Tensor& x,
                                                const LayerInputs&, std::uint64_t,
                                                Tensor& y) const {
  Backend& be = ctx.backend;
  const MoeConfig& moe = config_.moe;
  auto run = std::make_unique<Run>();
  const Tensor x_rows = rows_of(x);
  const std::int64_t t = x_rows.size(0), e = moe.num_experts, h = x_rows.size(1);
  const DType dt = x.dtype();
  route_rows(ctx, x_rows, x.size(1), *run);

  // Permutation: every (token, expert) pair on the map, expert-major, tokens in order (Megatron's
  // permute of routing_map.T).
  std::vector<std::int32_t> perm;
  std::vector<double> probs;
  run->group_rows.assign(static_cast<std::size_t>(e), 0);
  for (std::int64_t x_e = 0; x_e < e; ++x_e) {
    for (std::int64_t tok = 0; tok < t; ++tok) {
      const auto k = static_cast<std::size_t>(tok * e + x_e);
      if (!run->routing.map[k]) continue;
      perm.push_back(static_cast<std::int32_t>(tok));
      run->tokens.push_back(tok);
      probs.push_back(run->routing.probs[k]);
      ++run->group_rows[static_cast<std::size_t>(x_e)];
    }
  }
  const auto m = static_cast<std::int64_t>(perm.size());
  run->perm = on_device(be, perm, DType::i32);
  run->probs = on_device(be, probs, dt);
  run->xp = be.empty({m, h}, dt);
  be.embedding_forward(run->perm, x_rows, 0, run->xp);

  const std::int64_t f = moe.ffn_hidden_size;
  run->fc1_out = be.empty({m, fc1->value.size(1)}, dt);
  mixed_grouped_gemm(be, run->xp, false, fc1->value, true, run->group_rows, run->fc1_out,
                     ctx.compute);
  run->act = be.empty({m, f}, dt);
  if (config_.swiglu) {
    be.swiglu_forward(run->fc1_out, run->act);
  } else {
    be.gelu_forward(run->fc1_out, run->act, config_.gelu);
  }
  run->out = be.empty({m, h}, dt);
  mixed_grouped_gemm(be, run->act, false, fc2->value, true, run->group_rows, run->out, ctx.compute);
  Tensor weighted = be.empty({m, h}, dt);
  be.scale_rows(run->out, run->probs, weighted);
  Tensor y_rows = rows_of(y);
  be.embedding_backward(run->perm, weighted, 0, y_rows, false);
  if (moe.shared_expert_ffn > 0) {
    run->shared_out = be.empty({t, h}, dt);
    shared_experts.forward(ctx, x_rows, run->shared_out, run->shared);
    be.add(y_rows, run->shared_out, y_rows);
  }
  return run;
}

void MoeBlock::backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                        const LayerInputs&, std::uint64_t, Saved& saved, Tensor& dx) const {
  Backend& be = ctx.backend;
  Run& run = static_cast<Run&>(saved);
  const MoeConfig& moe = config_.moe;
  const Tensor x_rows = rows_of(x), dy_rows = rows_of(dy);
  Tensor dx_rows = rows_of(dx);
  const std::int64_t t = x_rows.size(0), e = moe.num_experts, h = x_rows.size(1);
  const std::int64_t m = run.xp.size(0);
  const DType dt = x.dtype();

  // The weighted sum's gradient: each permuted row's share of dy, and its weight's gradient.
  Tensor dyp = be.empty({m, h}, dt);
  be.embedding_forward(run.perm, dy_rows, 0, dyp);
  Tensor dprob = be.empty({m}, dt);
  be.row_dots(dyp, run.out, dprob);
  Tensor dout = be.empty({m, h}, dt);
  be.scale_rows(dyp, run.probs, dout);

  // The experts, last linear first; weight gradients accumulate.
  Tensor dact = be.empty(run.act.shape(), dt);
  mixed_grouped_gemm(be, dout, false, fc2->value, false, run.group_rows, dact, ctx.compute);
  mixed_grouped_gemm(be, dout, true, run.act, false, run.group_rows, fc2->grad, ctx.compute, 1.0f,
                     1.0f);
  Tensor dfc1 = be.empty(run.fc1_out.shape(), dt);
  if (config_.swiglu) {
    be.swiglu_backward(dact, run.fc1_out, dfc1);
  } else {
    be.gelu_backward(dact, run.fc1_out, dfc1, config_.gelu);
  }
  Tensor dxp = be.empty({m, h}, dt);
  mixed_grouped_gemm(be, dfc1, false, fc1->value, false, run.group_rows, dxp, ctx.compute);
  mixed_grouped_gemm(be, dfc1, true, run.xp, false, run.group_rows, fc1->grad, ctx.compute, 1.0f,
                     1.0f);
  be.embedding_backward(run.perm, dxp, 0, dx_rows, false);

  // The router: the routing weights' gradient through the score function, plus the auxiliary
  // losses' (already scaled).
  const std::vector<double> dp_perm = to_host(be, dprob);
  std::vector<double> dprobs(static_cast<std::size_t>(t * e), 0.0);
  std::int64_t row = 0;
  for (std::int64_t x_e = 0; x_e < e; ++x_e) {
    for (std::int64_t j = 0; j < run.group_rows[static_cast<std::size_t>(x_e)]; ++j, ++row) {
      const std::int64_t tok = run.tokens[static_cast<std::size_t>(row)];
      dprobs[static_cast<std::size_t>(tok * e + x_e)] = dp_perm[static_cast<std::size_t>(row)];
    }
  }
  std::vector<double> dlogits = run.aux_grad;
  dlogits.resize(static_cast<std::size_t>(t * e), 0.0);
  moe::route_backward(moe.routing, run.routing, dprobs.data(), dlogits.data());
  const Tensor dlogits_dev = on_device(be, dlogits, dt).view({t, e});
  Tensor dx_router = be.empty({t, h}, dt);
  router.backward(be, x_rows, dlogits_dev, &dx_router, ctx.compute);
  be.add(dx_rows, dx_router, dx_rows);
  if (moe.shared_expert_ffn > 0) {
    Tensor dx_shared = be.empty({t, h}, dt);
    shared_experts.backward(ctx, x_rows, dy_rows, run.shared, dx_shared);
    be.add(dx_rows, dx_shared, dx_rows);
  }
}

BlockSpec moe_block() {
  return {"mlp", {"pre_mlp_layernorm", false}, [] { return std::make_unique<MoeBlock>(); }, {}};
}

}  // namespace megatron::nn
