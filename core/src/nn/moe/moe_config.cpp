// The Mixture of Experts [model] keys, Megatron's names and defaults.
#include "megatron/nn/moe/moe_config.h"

namespace megatron::nn {

void declare_moe_config(config::TableSchema& s) {
  using config::Range;
  s.integer("num_experts", 0, "experts of each MoE layer (0: dense MLPs)", Range::at_least(0))
      .optional_integer("moe_ffn_hidden_size", "each expert's MLP width (default ffn_hidden_size)",
                        Range::at_least(1))
      .integer("moe_layer_freq", 1, "an MoE layer every this many layers (layer l: l % freq == 0)",
               Range::at_least(1))
      .optional_integer_list("moe_layer_pattern",
                             "1 (MoE) or 0 (dense) per layer; overrides moe_layer_freq",
                             Range::between(0, 1))
      .integer("moe_router_topk", 2, "experts each token is routed to", Range::at_least(1))
      .string("moe_router_score_function", "softmax", "router score function",
              {"softmax", "sigmoid"})
      .boolean("moe_router_pre_softmax", false, "softmax over all experts before the top-k")
      .boolean("moe_router_enable_expert_bias", false,
               "aux-loss-free balancing: a per-expert bias on the selection scores, updated "
               "every iteration from the tokens each expert took")
      .real("moe_router_bias_update_rate", 1e-3, "step of the expert bias's update",
            Range::at_least(0))
      .optional_real("moe_router_topk_scaling_factor", "factor on the top-k routing weights",
                     Range::positive())
      .integer("moe_router_num_groups", 0, "expert groups of group-limited routing (0: none)",
               Range::at_least(0))
      .integer("moe_router_group_topk", 0, "groups each token may use (group-limited routing)",
               Range::at_least(0))
      .string("moe_router_load_balancing_type", "aux_loss", "load-balancing loss",
              {"aux_loss", "seq_aux_loss", "none"})
      .real("moe_aux_loss_coeff", 0.0, "coefficient of the load-balancing loss", Range::at_least(0))
      .real("moe_z_loss_coeff", 0.0, "coefficient of the router z-loss (0: none)",
            Range::at_least(0))
      .optional_real("moe_expert_capacity_factor",
                     "expert capacity as a multiple of an even share (default: dropless)",
                     Range::positive())
      .string("moe_token_drop_policy", "probs", "tokens kept over capacity", {"probs", "position"})
      .boolean("moe_pad_expert_input_to_capacity", false,
               "every expert processes exactly its capacity (needs a capacity factor)")
      .integer("moe_shared_expert_intermediate_size", 0, "shared experts' MLP width (0: none)",
               Range::at_least(0))
      .string("moe_token_dispatcher_type", "allgather", "how tokens reach their experts",
              {"allgather", "alltoall"});
  s.rule([](const config::ConfigTable& t) {
    const std::int64_t experts = t.integer("num_experts");
    if (experts == 0) return;
    if (t.integer("moe_router_topk") > experts) {
      t.fail("moe_router_topk", "routes each token to " +
                                    std::to_string(t.integer("moe_router_topk")) +
                                    " experts, but num_experts is " + std::to_string(experts));
    }
    const std::int64_t groups = t.integer("moe_router_num_groups");
    const std::int64_t group_topk = t.integer("moe_router_group_topk");
    if ((groups > 0) != (group_topk > 0) ||
        (groups > 0 && (experts % groups != 0 || group_topk > groups ||
                        t.integer("moe_router_topk") % group_topk != 0))) {
      t.fail("moe_router_group_topk",
             "group-limited routing needs both moe_router_num_groups (dividing num_experts) and "
             "moe_router_group_topk (at most the groups, dividing moe_router_topk)");
    }
    if (t.boolean("moe_router_enable_expert_bias") &&
        t.string("moe_router_score_function") != "sigmoid") {
      t.fail("moe_router_enable_expert_bias",
             "the aux-loss-free expert bias needs moe_router_score_function = \"sigmoid\" (as "
             "Megatron's)");
    }
    if (t.boolean("moe_pad_expert_input_to_capacity") && !t.has("moe_expert_capacity_factor")) {
      t.fail("moe_pad_expert_input_to_capacity",
             "pads to a capacity, so it needs moe_expert_capacity_factor");
    }
    if (!t.boolean("disable_bias_linear")) {
      t.fail("disable_bias_linear",
             "the experts' grouped GEMM has no biases (as Megatron's GroupedMLP): set "
             "disable_bias_linear = true with num_experts");
    }
    if (t.has("moe_layer_pattern") &&
        static_cast<std::int64_t>(t.integer_list("moe_layer_pattern").size()) !=
            t.integer("num_layers")) {
      t.fail("moe_layer_pattern",
             "has " + std::to_string(t.integer_list("moe_layer_pattern").size()) + " entries for " +
                 std::to_string(t.integer("num_layers")) + " layers");
    }
  });
}

MoeConfig parse_moe_config(const config::ConfigTable& t, std::int64_t num_layers,
                           std::int64_t ffn_hidden_size) {
  MoeConfig c;
  c.num_experts = t.integer("num_experts");
  c.ffn_hidden_size = t.find_integer("moe_ffn_hidden_size").value_or(ffn_hidden_size);
  if (t.has("moe_layer_pattern")) {
    c.layer_pattern = t.integer_list("moe_layer_pattern");
  } else {
    const std::int64_t freq = t.integer("moe_layer_freq");
    for (std::int64_t l = 0; l < num_layers; ++l)
      c.layer_pattern.push_back(l % freq == 0 ? 1 : 0);
  }
  moe::RoutingConfig& r = c.routing;
  r.num_experts = c.num_experts;
  r.topk = t.integer("moe_router_topk");
  r.score = t.string("moe_router_score_function") == "sigmoid" ? moe::ScoreFunction::sigmoid
                                                               : moe::ScoreFunction::softmax;
  r.pre_softmax = t.boolean("moe_router_pre_softmax");
  c.expert_bias = t.boolean("moe_router_enable_expert_bias");
  c.bias_update_rate = t.real("moe_router_bias_update_rate");
  r.scaling_factor = t.find_real("moe_router_topk_scaling_factor").value_or(0.0);
  r.num_groups = t.integer("moe_router_num_groups");
  r.group_topk = t.integer("moe_router_group_topk");
  const std::string& lb = t.string("moe_router_load_balancing_type");
  c.load_balancing = lb == "seq_aux_loss" ? LoadBalancing::seq_aux_loss
                     : lb == "none"       ? LoadBalancing::none
                                          : LoadBalancing::aux_loss;
  c.aux_loss_coeff = t.real("moe_aux_loss_coeff");
  c.z_loss_coeff = t.real("moe_z_loss_coeff");
  c.capacity_factor = t.find_real("moe_expert_capacity_factor").value_or(0.0);
  c.drop_policy = t.string("moe_token_drop_policy") == "position" ? moe::DropPolicy::position
                                                                  : moe::DropPolicy::probs;
  c.pad_to_capacity = t.boolean("moe_pad_expert_input_to_capacity");
  c.shared_expert_ffn = t.integer("moe_shared_expert_intermediate_size");
  c.dispatcher = t.string("moe_token_dispatcher_type") == "alltoall" ? TokenDispatcher::alltoall
                                                                     : TokenDispatcher::allgather;
  return c;
}

}  // namespace megatron::nn
