// The arithmetic of Megatron-core's MoE router (router.py, moe_utils.py) on host rows of logits:
// top-k selection with its score functions (softmax after or before top-k, sigmoid with the
// aux-loss-free expert bias, group-limited routing, the top-k scaling factor), capacity dropping
// and padding, the load-balancing losses (aux_loss, seq_aux_loss) and the z-loss, each with its
// gradient with respect to the logits. The logits are few (tokens x experts) and the selection is
// branchy, so this runs on the host in fp64 whatever the model's device; the router's GEMMs stay
// on the backend.
#pragma once

#include <cstdint>
#include <vector>

namespace megatron::nn::moe {

enum class ScoreFunction { softmax, sigmoid };
enum class DropPolicy { probs, position };

struct RoutingConfig {
  std::int64_t num_experts = 0;
  std::int64_t topk = 2;                         // moe_router_topk
  ScoreFunction score = ScoreFunction::softmax;  // moe_router_score_function
  bool pre_softmax = false;                      // moe_router_pre_softmax
  double scaling_factor = 0;                     // moe_router_topk_scaling_factor; 0: none
  std::int64_t num_groups = 0, group_topk = 0;   // group-limited routing when both are > 0
};

// Megatron's dense routing: probs and map are (tokens, experts), row t for token t (rows in the
// activations' order, s * B + b).
struct Routing {
  std::int64_t tokens = 0, experts = 0;
  std::vector<double> probs;           // the weight of each (token, expert); 0 off the map
  std::vector<std::uint8_t> map;       // routed (or, padded to capacity, processed) pairs
  std::vector<std::uint8_t> selected;  // the top-k choice before any capacity dropping
  std::vector<double> scores;          // what backward differentiates (score function's values)
};

// Top-k routing of `tokens` rows of num_experts logits. expert_bias (num_experts, may be null)
// shifts the sigmoid scores used for selection only. Ties go to the lower expert index.
Routing route(const RoutingConfig& config, const double* logits, std::int64_t tokens,
              const double* expert_bias = nullptr);
// Adds to dlogits (tokens, experts) the gradient of sum(dprobs * routing.probs): only pairs still
// on the map and selected by top-k carry gradient (a dropped pair's probability was zeroed).
void route_backward(const RoutingConfig& config, const Routing& routing, const double* dprobs,
                    double* dlogits);

// Megatron's get_capacity for the experts' top-k assignments: ceil(tokens * topk / experts *
// factor).
std::int64_t expert_capacity(std::int64_t tokens, std::int64_t topk, std::int64_t experts,
                             double capacity_factor);
// apply_router_token_dropping: each expert keeps at most its capacity of tokens, those of the
// largest probabilities (`probs`, ties to the earlier token) or the earliest positions
// (`position`); with pad_to_capacity every expert processes exactly its capacity of tokens
// (the kept ones, then zero-weight padding from the same ranking).
void drop_over_capacity(Routing& routing, std::int64_t topk, double capacity_factor,
                        DropPolicy policy, bool pad_to_capacity);

// ---- load balancing ------------------------------------------------------------------------
// Tokens each expert would take for the load-balancing losses (Megatron's
// compute_routing_scores_for_aux_loss: top-k of the full softmax, or of the normalised sigmoid),
// per group of rows: row t belongs to group t % groups (1 group: the micro-batch, aux_loss; B:
// each sequence of the (S, B) rows, seq_aux_loss). Returns (groups, experts) counts, to be
// summed over the tensor- and context-parallel ranks before the loss when those split the rows.
std::vector<double> aux_tokens_per_expert(const RoutingConfig& config, const double* logits,
                                          std::int64_t tokens, std::int64_t groups);
// switch_load_balancing_loss_func per group, averaged over the groups:
//   coeff * E / (topk * N^2) * sum_e (sum of the group's scores for e) * counts[g][e],
// with N = total_tokens_per_group (the group's rows over every rank sharing them). Returns the
// loss (coefficient included); with dlogits, adds grad_scale * its gradient.
double load_balancing_loss(const RoutingConfig& config, const double* logits, std::int64_t tokens,
                           std::int64_t groups, const std::vector<double>& counts,
                           double total_tokens_per_group, double coeff, double grad_scale,
                           double* dlogits);
// z_loss_func: coeff * mean over tokens of logsumexp(logits)^2; with dlogits, adds grad_scale *
// its gradient.
double z_loss(const double* logits, std::int64_t tokens, std::int64_t experts, double coeff,
              double grad_scale, double* dlogits);
// get_updated_expert_bias: bias += rate * sign(mean(tokens_per_expert) - tokens_per_expert), in
// fp32 as Megatron's buffer.
void update_expert_bias(std::vector<float>& bias, const std::vector<double>& tokens_per_expert,
                        double rate);

}  // namespace megatron::nn::moe
