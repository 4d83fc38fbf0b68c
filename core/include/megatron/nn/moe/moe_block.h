// Megatron-core's MoELayer as a block kind: the router (`router.weight`, no bias) picks each
// token's experts, the tokens are permuted into expert order (a row gather), every expert's MLP
// runs as one grouped GEMM per linear layer (`experts.linear_fc1.weight` (E, fc1, h),
// `experts.linear_fc2.weight` (E, h, ffn): the grouped form, expert e at index e of dim 0), the
// outputs are weighted by their routing probabilities and summed back per token (a row
// scatter-add); shared experts (`shared_experts.linear_fc1/fc2`) add a dense MLP of every token.
// The load-balancing and z losses are reported to LayerContext::aux_losses and their gradients,
// scaled by the step's loss scale, join the router's in backward, as Megatron's
// MoEAuxLossAutoScaler does. Under expert parallelism each rank holds a contiguous share of the
// experts and the tokens reach them by all-gather or all-to-all (moe::Dispatcher); routing and
// the auxiliary losses stay each rank's own tokens'. Under tensor parallelism (which needs
// sequence parallelism) each rank routes its sequence shard; the experts are not split further.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megatron/nn/block.h"
#include "megatron/nn/core_blocks.h"
#include "megatron/nn/linear.h"
#include "megatron/nn/mlp.h"

namespace megatron::nn {

class MoeBlock : public Mixer {
 public:
  // Dropless, each token is routed on its own and decoding needs nothing kept; with a capacity
  // factor the dropped tokens depend on the whole sequence, so it cannot decode incrementally.
  Decoding decoding() const override {
    return config_.moe.capacity_factor > 0 ? Decoding::none : Decoding::stateless;
  }
  void declare(ParamFactory& factory, const std::string& prefix,
               const TransformerConfig& config) override;
  std::unique_ptr<Saved> forward(const LayerContext& ctx, const Tensor& x,
                                 const LayerInputs& inputs, std::uint64_t first_site,
                                 Tensor& y) const override;
  void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                const LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                Tensor& dx) const override;
  // With moe_router_enable_expert_bias: the iteration's token counts per expert summed over the
  // tensor- and data-parallel ranks, the bias moved by the update rate towards even loads
  // (Megatron's _update_router_expert_bias), the counts reset.
  void end_training_iteration(Backend& backend, Communicator* data) override;

  Linear router;
  Parameter* fc1 = nullptr;  // (E, fc1 width, h): [gate; up] per expert with SwiGLU
  Parameter* fc2 = nullptr;  // (E, h, ffn)
  Mlp shared_experts;        // declared when moe.shared_expert_ffn > 0
  // router.expert_bias (E) f32, a buffer (Model::buffers): shifts the selection scores only.
  // Declared with moe_router_enable_expert_bias.
  Parameter* expert_bias = nullptr;

 private:
  struct Run;
  // The routing of one micro-batch's rows and, in training, the auxiliary losses' gradient.
  void route_rows(const LayerContext& ctx, const Tensor& x_rows, std::int64_t sequences,
                  Run& run) const;
  // The element-wise sum of `values` over the tensor-parallel group.
  std::vector<double> tensor_parallel_sum(Backend& be, const std::vector<double>& values) const;
  TransformerConfig config_;
  TensorParallelism tp_;  // under sequence parallelism each rank routes its sequence shard
  ExpertParallelism ep_;  // this rank holds experts [rank * E / size, (rank + 1) * E / size)
  // Tokens this rank routed to each expert in the iteration's training forwards (not in
  // recomputed or evaluation ones), for the expert bias's update.
  mutable std::vector<double> iteration_tokens_;
};

// pre_mlp_layernorm -> mlp (an MoE block): Megatron names the MoE layer's norm so in the local
// spec and in the hybrid stack alike (there is no fused LayerNormLinear in front of a router).
BlockSpec moe_block();

}  // namespace megatron::nn
