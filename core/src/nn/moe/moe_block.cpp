// MoeBlock: routing, permutation into expert order, the experts' grouped GEMMs, the weighted
// scatter back to the tokens, shared experts, and the backward of each, as Megatron-core's
// MoELayer (dropless or with capacity) computes them on one rank.
#include "megatron/nn/moe/moe_block.h"

#include <algorithm>
#include <string>
#include <utility>

#include "host_transfer.h"
#include "megatron/error.h"
#include "megatron/nn/mixed_gemm.h"
#include "megatron/nn/moe/routing.h"
#include "token_dispatcher.h"

namespace megatron::nn {

using moe::on_device;
using moe::to_host;

// What one micro-batch's forward keeps for backward.
struct MoeBlock::Run : Mixer::Saved {
  moe::Routing routing;          // host, dense (tokens, experts)
  std::vector<double> aux_grad;  // (tokens, experts): the auxiliary losses' gradient, scaled
  std::unique_ptr<moe::Dispatcher> dispatcher;
  // The local experts' rows (every source's): (R, h), (R, fc1), (R, ffn).
  Tensor xp, fc1_out, act;
  Mlp::Saved shared;
  Tensor shared_out;
};

void MoeBlock::declare(ParamFactory& factory, const std::string& prefix,
                       const TransformerConfig& config) {
  config_ = config;
  const MoeConfig& moe = config.moe;
  // Megatron: an MoE layer under tensor parallelism needs sequence parallelism, so each
  // tensor-parallel rank routes its own sequence shard (the experts themselves are not split:
  // expert_tensor_parallel_size 1, checked by the trainer).
  if (factory.tp.split() && !factory.tp.sp()) {
    throw ConfigError(
        "[parallel] sequence_parallel: Mixture of Experts (num_experts) with "
        "tensor_model_parallel_size " +
        std::to_string(factory.tp.size) + " needs sequence_parallel = true");
  }
  if (factory.ep.tensor_size > 1) {
    throw ConfigError(
        "[parallel] expert_tensor_parallel_size = " + std::to_string(factory.ep.tensor_size) +
        " (0 follows tensor_model_parallel_size): experts split over "
        "tensor-parallel ranks are not available yet; set it to 1");
  }
  tp_ = factory.tp;
  ep_ = factory.ep;
  const std::int64_t e = moe.num_experts, h = config.hidden_size, f = moe.ffn_hidden_size;
  router = Linear::declare(factory, prefix + ".router", h, e, false, config.init_method_std);
  // Replicated over the tensor-parallel ranks, each using it on its sequence shard.
  router.weight->sequence_parallel = tp_.sp();
  if (moe.expert_bias) {
    expert_bias = &factory.declare_buffer(prefix + ".router.expert_bias", {e});
    iteration_tokens_.assign(static_cast<std::size_t>(e), 0.0);
  }
  const std::int64_t fc1_width = config.swiglu ? 2 * f : f;
  fc1 = &factory.declare_experts(prefix + ".experts.linear_fc1.weight", {e, fc1_width, h},
                                 ParamInit::normal, config.init_method_std, moe.routing.topk);
  fc2 = &factory.declare_experts(prefix + ".experts.linear_fc2.weight", {e, h, f},
                                 ParamInit::normal, config.output_init_std(), moe.routing.topk);
  fc1->narrowable = fc2->narrowable = true;
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
  const std::vector<double> bias =
      expert_bias ? to_host(be, expert_bias->value) : std::vector<double>{};
  run.routing = moe::route(moe.routing, l.data(), t, expert_bias ? bias.data() : nullptr);
  if (moe.capacity_factor > 0) {
    moe::drop_over_capacity(run.routing, moe.routing.topk, moe.capacity_factor, moe.drop_policy,
                            moe.pad_to_capacity);
  }
  // The expert bias's statistics: the final map's pairs, in a training forward that reports its
  // losses (a recomputed forward does not: nothing is counted twice).
  if (expert_bias && ctx.training && ctx.aux_losses) {
    for (std::int64_t tok = 0; tok < t; ++tok) {
      for (std::int64_t x_e = 0; x_e < e; ++x_e)
        iteration_tokens_[static_cast<std::size_t>(x_e)] +=
            run.routing.map[static_cast<std::size_t>(tok * e + x_e)];
    }
  }
  // Megatron adds the auxiliary losses in training only; their gradients are of loss_scale x
  // the loss (MoEAuxLossAutoScaler's main_loss_backward_scale).
  if (!ctx.training) return;
  run.aux_grad.assign(static_cast<std::size_t>(t * e), 0.0);
  // Under sequence and context parallelism each rank holds part of the tokens: the expert counts
  // are summed over the tensor x context group, the z-loss coefficient divided by its size
  // (Megatron's router, its tp_cp group), so the ranks' terms add up to the unsplit run's; the
  // logged values are those sums. The context-parallel ranks' gradients are averaged with the
  // data-parallel ones, so each rank's term's gradient is scaled by cp (as the lm loss's).
  const double cp = ctx.context.size;
  const double shards = (tp_.sp() ? tp_.size : 1) * cp;
  const float grad_scale = ctx.loss_scale * static_cast<float>(cp);
  auto group_sum = [&](std::vector<double> values) {
    if (tp_.sp()) values = tensor_parallel_sum(ctx.backend, values);
    return context_parallel_sum(ctx.backend, ctx.context, std::move(values));
  };
  std::vector<std::pair<const char*, double>> logged;
  if (moe.z_loss_coeff > 0) {
    const double coeff = moe.z_loss_coeff / shards;
    const double z = moe::z_loss(l.data(), t, e, coeff, grad_scale, run.aux_grad.data());
    logged.emplace_back("z_loss", z / moe.z_loss_coeff);
  }
  if (moe.load_balancing != LoadBalancing::none && moe.aux_loss_coeff > 0) {
    // aux_loss: the micro-batch's tokens; seq_aux_loss: each sequence's (rows s * B + b).
    const std::int64_t groups = moe.load_balancing == LoadBalancing::seq_aux_loss ? sequences : 1;
    const std::vector<double> counts =
        group_sum(moe::aux_tokens_per_expert(moe.routing, l.data(), t, groups));
    const double loss = moe::load_balancing_loss(
        moe.routing, l.data(), t, groups, counts, static_cast<double>(t / groups) * shards,
        moe.aux_loss_coeff, grad_scale, run.aux_grad.data());
    const char* name = moe.load_balancing == LoadBalancing::seq_aux_loss ? "seq_load_balancing_loss"
                                                                         : "load_balancing_loss";
    logged.emplace_back(name, loss / moe.aux_loss_coeff);
  }
  if (shards > 1 && !logged.empty()) {
    std::vector<double> values;
    for (const auto& [name, value] : logged)
      values.push_back(value);
    values = group_sum(std::move(values));
    for (std::size_t i = 0; i < logged.size(); ++i)
      logged[i].second = values[i];
  }
  if (ctx.aux_losses) {
    for (const auto& [name, value] : logged)
      ctx.aux_losses->add(name, value);
  }
}

void MoeBlock::end_training_iteration(Backend& be, Communicator* data) {
  if (!expert_bias) return;
  std::vector<double> counts = iteration_tokens_;
  if (tp_.sp()) counts = tensor_parallel_sum(be, counts);
  if (data) {
    Tensor d = on_device(be, counts, DType::f64);
    data->all_reduce(d.raw_data(), counts.size(), DType::f64, ReduceOp::sum);
    counts = to_host(be, d);
  }
  Tensor host = Tensor::empty(expert_bias->value.shape(), DType::f32);
  be.copy(expert_bias->value, host);
  std::vector<float> bias = host.to_vector<float>();
  moe::update_expert_bias(bias, counts, config_.moe.bias_update_rate);
  be.copy(Tensor::from(bias, host.shape()), expert_bias->value);
  std::fill(iteration_tokens_.begin(), iteration_tokens_.end(), 0.0);
}

std::vector<double> MoeBlock::tensor_parallel_sum(Backend& be,
                                                  const std::vector<double>& values) const {
  Tensor t = on_device(be, values, DType::f64);
  tp_all_reduce(tp_, t);
  return to_host(be, t);
}

std::unique_ptr<Mixer::Saved> MoeBlock::forward(const LayerContext& ctx, const Tensor& x,
                                                const LayerInputs&, std::uint64_t,
                                                Tensor& y) const {
  Backend& be = ctx.backend;
  const MoeConfig& moe = config_.moe;
  auto run = std::make_unique<Run>();
  const Tensor x_rows = rows_of(x);
  const std::int64_t t = x_rows.size(0), h = x_rows.size(1);
  const DType dt = x.dtype();
  route_rows(ctx, x_rows, x.size(1), *run);

  // The tokens reach this rank's experts (identity on one rank), each expert's MLP runs as one
  // grouped GEMM per linear layer, and the outputs come back weighted by their probabilities.
  run->dispatcher = moe::make_dispatcher(moe.dispatcher, be, ep_, run->routing, dt);
  const std::vector<std::int64_t>& local_rows = run->dispatcher->local_rows();
  run->xp = run->dispatcher->dispatch(be, x_rows);
  const std::int64_t r = run->xp.size(0), f = moe.ffn_hidden_size;
  run->fc1_out = be.empty({r, fc1->value.size(1)}, dt);
  mixed_grouped_gemm(be, run->xp, false, fc1->value, true, local_rows, run->fc1_out, ctx.compute);
  run->act = be.empty({r, f}, dt);
  if (config_.swiglu) {
    be.swiglu_forward(run->fc1_out, run->act);
  } else {
    be.gelu_forward(run->fc1_out, run->act, config_.gelu);
  }
  Tensor local_out = be.empty({r, h}, dt);
  mixed_grouped_gemm(be, run->act, false, fc2->value, true, local_rows, local_out, ctx.compute);
  Tensor y_rows = rows_of(y);
  run->dispatcher->combine(be, local_out, y_rows);
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
  const DType dt = x.dtype();

  // The weighted sum's gradient: the local experts' output gradient and the weights'.
  std::vector<double> dprobs;
  const Tensor dout_local = run.dispatcher->combine_backward(be, dy_rows, dprobs);

  // The experts, last linear first, on the rows this rank's experts received; weight gradients
  // accumulate.
  const std::vector<std::int64_t>& local_rows = run.dispatcher->local_rows();
  Tensor dact = be.empty(run.act.shape(), dt);
  mixed_grouped_gemm(be, dout_local, false, fc2->value, false, local_rows, dact, ctx.compute);
  mixed_grouped_gemm(be, dout_local, true, run.act, false, local_rows, fc2->grad, ctx.compute, 1.0f,
                     1.0f);
  Tensor dfc1 = be.empty(run.fc1_out.shape(), dt);
  if (config_.swiglu) {
    be.swiglu_backward(dact, run.fc1_out, dfc1);
  } else {
    be.gelu_backward(dact, run.fc1_out, dfc1, config_.gelu);
  }
  Tensor dxp_local = be.empty(run.xp.shape(), dt);
  mixed_grouped_gemm(be, dfc1, false, fc1->value, false, local_rows, dxp_local, ctx.compute);
  mixed_grouped_gemm(be, dfc1, true, run.xp, false, local_rows, fc1->grad, ctx.compute, 1.0f, 1.0f);
  run.dispatcher->dispatch_backward(be, dxp_local, dx_rows);

  // The router: the routing weights' gradient through the score function, plus the auxiliary
  // losses' (already scaled).
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
