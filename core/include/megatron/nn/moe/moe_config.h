// Mixture of Experts settings of a transformer (Megatron-core's TransformerConfig moe_* fields)
// and their [model] keys, for any model whose layers may hold an MoE block (GPT, hybrid Mamba).
#pragma once

#include <cstdint>
#include <vector>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/nn/moe/routing.h"

namespace megatron::nn {

enum class LoadBalancing { aux_loss, seq_aux_loss, none };
enum class TokenDispatcher { allgather, alltoall };

struct MoeConfig {
  std::int64_t num_experts = 0;      // 0: every layer keeps its dense MLP
  std::int64_t ffn_hidden_size = 0;  // moe_ffn_hidden_size: each expert's width
  // Per layer of the stack: 1 where the MLP is an MoE block (moe_layer_freq / moe_layer_pattern).
  std::vector<std::int64_t> layer_pattern;
  moe::RoutingConfig routing;
  // moe_router_enable_expert_bias: router.expert_bias shifts the selection scores and moves by
  // bias_update_rate (moe_router_bias_update_rate) every iteration towards even expert loads.
  bool expert_bias = false;
  double bias_update_rate = 1e-3;
  LoadBalancing load_balancing = LoadBalancing::aux_loss;
  double aux_loss_coeff = 0;   // moe_aux_loss_coeff; 0: no load-balancing loss
  double z_loss_coeff = 0;     // moe_z_loss_coeff; 0: none
  double capacity_factor = 0;  // moe_expert_capacity_factor; 0: dropless
  moe::DropPolicy drop_policy = moe::DropPolicy::probs;
  bool pad_to_capacity = false;
  std::int64_t shared_expert_ffn = 0;  // moe_shared_expert_intermediate_size; 0: none
  TokenDispatcher dispatcher = TokenDispatcher::allgather;

  bool is_moe_layer(std::int64_t layer) const {
    return num_experts > 0 && layer_pattern.at(static_cast<std::size_t>(layer)) != 0;
  }
};

// The moe_* keys and num_experts, with their rules (top-k within the experts, capacity settings
// that go together, the pattern's length); declared after the shared transformer keys.
void declare_moe_config(config::TableSchema& schema);
// Reads them; `num_layers` sizes the layer pattern and `ffn_hidden_size` is the default expert
// width.
MoeConfig parse_moe_config(const config::ConfigTable& table, std::int64_t num_layers,
                           std::int64_t ffn_hidden_size);

}  // namespace megatron::nn
