// Top-k routing, capacity, load-balancing and z losses of Megatron-core's router, with their
// gradients, on host fp64 rows.
#include "megatron/nn/moe/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "megatron/error.h"

namespace megatron::nn::moe {

namespace {

constexpr double kSigmoidEps = 1e-20;  // Megatron's guard on the normalising sum

// Indices of the k largest values, largest first, ties to the lower index (torch.topk's order).
std::vector<std::int64_t> top_indices(const std::vector<double>& v, std::int64_t k) {
  std::vector<std::int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
    return v[static_cast<std::size_t>(a)] > v[static_cast<std::size_t>(b)];
  });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

// group_limited_topk: experts split into num_groups equal groups, each scored by the sum of its
// top (topk / group_topk) values; the group_topk best groups stay, the rest are masked out.
std::vector<std::int64_t> routing_top(const RoutingConfig& c, std::vector<double> values) {
  if (c.num_groups > 0 && c.group_topk > 0) {
    const std::int64_t per = c.num_experts / c.num_groups;
    std::vector<double> group_scores(static_cast<std::size_t>(c.num_groups));
    for (std::int64_t g = 0; g < c.num_groups; ++g) {
      std::vector<double> members(values.begin() + g * per, values.begin() + (g + 1) * per);
      double sum = 0;
      for (const std::int64_t i : top_indices(members, c.topk / c.group_topk))
        sum += members[static_cast<std::size_t>(i)];
      group_scores[static_cast<std::size_t>(g)] = sum;
    }
    std::vector<std::uint8_t> keep(static_cast<std::size_t>(c.num_groups), 0);
    for (const std::int64_t g : top_indices(group_scores, c.group_topk))
      keep[static_cast<std::size_t>(g)] = 1;
    for (std::int64_t e = 0; e < c.num_experts; ++e)
      if (!keep[static_cast<std::size_t>(e / per)])
        values[static_cast<std::size_t>(e)] = -std::numeric_limits<double>::infinity();
  }
  return top_indices(values, c.topk);
}

void softmax(const double* x, std::int64_t n, double* out) {
  const double m = *std::max_element(x, x + n);
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i)
    sum += out[i] = std::exp(x[i] - m);
  for (std::int64_t i = 0; i < n; ++i)
    out[i] /= sum;
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// The scores the load-balancing losses use: the full softmax, or the sigmoid normalised to sum 1.
void aux_scores(const RoutingConfig& c, const double* logits, double* out) {
  const std::int64_t e = c.num_experts;
  if (c.score == ScoreFunction::softmax) return softmax(logits, e, out);
  double sum = 0;
  for (std::int64_t i = 0; i < e; ++i)
    sum += out[i] = sigmoid(logits[i]);
  for (std::int64_t i = 0; i < e; ++i)
    out[i] /= sum + kSigmoidEps;
}

// Adds to dlogits the gradient through aux_scores given ds (the gradient w.r.t. the scores).
void aux_scores_backward(const RoutingConfig& c, const double* logits, const double* s,
                         const double* ds, double* dlogits) {
  const std::int64_t e = c.num_experts;
  if (c.score == ScoreFunction::softmax) {
    double dot = 0;
    for (std::int64_t i = 0; i < e; ++i)
      dot += s[i] * ds[i];
    for (std::int64_t i = 0; i < e; ++i)
      dlogits[i] += s[i] * (ds[i] - dot);
    return;
  }
  std::vector<double> sig(static_cast<std::size_t>(e));
  double z = kSigmoidEps, dot = 0;
  for (std::int64_t i = 0; i < e; ++i) {
    sig[static_cast<std::size_t>(i)] = sigmoid(logits[i]);
    z += sig[static_cast<std::size_t>(i)];
  }
  for (std::int64_t i = 0; i < e; ++i)
    dot += ds[i] * sig[static_cast<std::size_t>(i)];
  for (std::int64_t i = 0; i < e; ++i) {
    const double si = sig[static_cast<std::size_t>(i)];
    dlogits[i] += (ds[i] / z - dot / (z * z)) * si * (1 - si);
  }
}

void check(const RoutingConfig& c) {
  if (c.num_experts < 1 || c.topk < 1 || c.topk > c.num_experts) {
    throw Error("MoE routing: topk " + std::to_string(c.topk) + " of " +
                std::to_string(c.num_experts) + " experts");
  }
  if ((c.num_groups > 0) != (c.group_topk > 0) ||
      (c.num_groups > 0 && (c.num_experts % c.num_groups != 0 || c.topk % c.group_topk != 0 ||
                            c.group_topk > c.num_groups))) {
    throw Error(
        "MoE routing: group-limited routing needs num_experts divisible by num_groups "
        "and topk by group_topk, group_topk <= num_groups");
  }
}

}  // namespace

Routing route(const RoutingConfig& c, const double* logits, std::int64_t tokens,
              const double* expert_bias) {
  check(c);
  const std::int64_t e = c.num_experts;
  const auto n = static_cast<std::size_t>(tokens * e);
  Routing r;
  r.tokens = tokens;
  r.experts = e;
  r.probs.assign(n, 0.0);
  r.map.assign(n, 0);
  r.selected.assign(n, 0);
  r.scores.assign(n, 0.0);
  const double scale = c.scaling_factor > 0 ? c.scaling_factor : 1.0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* l = logits + t * e;
    double* s = r.scores.data() + t * e;
    double* p = r.probs.data() + t * e;
    std::vector<double> pick(l, l + e);
    if (c.score == ScoreFunction::sigmoid) {
      for (std::int64_t i = 0; i < e; ++i)
        s[i] = sigmoid(l[i]);
      for (std::int64_t i = 0; i < e; ++i)
        pick[static_cast<std::size_t>(i)] = s[i] + (expert_bias ? expert_bias[i] : 0.0);
    } else if (c.pre_softmax) {
      softmax(l, e, s);
      pick.assign(s, s + e);
    }
    const std::vector<std::int64_t> top = routing_top(c, pick);
    if (c.score == ScoreFunction::softmax && !c.pre_softmax) {
      // Softmax over the selected logits; the scores hold those probabilities.
      std::vector<double> chosen, out(top.size());
      for (const std::int64_t i : top)
        chosen.push_back(l[i]);
      softmax(chosen.data(), static_cast<std::int64_t>(chosen.size()), out.data());
      for (std::size_t j = 0; j < top.size(); ++j)
        s[top[j]] = out[j];
    }
    double sum = kSigmoidEps;
    for (const std::int64_t i : top)
      sum += s[i];
    const bool normalise = c.score == ScoreFunction::sigmoid && c.topk > 1;
    for (const std::int64_t i : top) {
      p[i] = (normalise ? s[i] / sum : s[i]) * scale;
      r.map[static_cast<std::size_t>(t * e + i)] = r.selected[static_cast<std::size_t>(t * e + i)] =
          1;
    }
  }
  return r;
}

void route_backward(const RoutingConfig& c, const Routing& r, const double* dprobs,
                    double* dlogits) {
  const std::int64_t e = r.experts;
  const double scale = c.scaling_factor > 0 ? c.scaling_factor : 1.0;
  std::vector<double> dp(static_cast<std::size_t>(e));
  for (std::int64_t t = 0; t < r.tokens; ++t) {
    const double* s = r.scores.data() + t * e;
    double* dl = dlogits + t * e;
    for (std::int64_t i = 0; i < e; ++i) {
      const auto k = static_cast<std::size_t>(t * e + i);
      dp[static_cast<std::size_t>(i)] = r.map[k] && r.selected[k] ? dprobs[k] * scale : 0.0;
    }
    const std::uint8_t* sel = r.selected.data() + t * e;
    if (c.score == ScoreFunction::softmax) {
      // Post-softmax: s holds the softmax of the selected logits (zero elsewhere); pre-softmax:
      // the full softmax. Either way dl = s * (ds - <s, ds>) with ds zero off the selection.
      double dot = 0;
      for (std::int64_t i = 0; i < e; ++i)
        dot += s[i] * dp[static_cast<std::size_t>(i)];
      for (std::int64_t i = 0; i < e; ++i) {
        if (!c.pre_softmax && !sel[i]) continue;
        dl[i] += s[i] * (dp[static_cast<std::size_t>(i)] - dot);
      }
      continue;
    }
    double z = kSigmoidEps, dot = 0;
    for (std::int64_t i = 0; i < e; ++i)
      if (sel[i]) {
        z += s[i];
        dot += dp[static_cast<std::size_t>(i)] * s[i];
      }
    for (std::int64_t i = 0; i < e; ++i) {
      if (!sel[i]) continue;
      const double ds = c.topk > 1 ? dp[static_cast<std::size_t>(i)] / z - dot / (z * z)
                                   : dp[static_cast<std::size_t>(i)];
      dl[i] += ds * s[i] * (1 - s[i]);
    }
  }
}

std::int64_t expert_capacity(std::int64_t tokens, std::int64_t topk, std::int64_t experts,
                             double capacity_factor) {
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(tokens * topk) /
                                             static_cast<double>(experts) * capacity_factor));
}

void drop_over_capacity(Routing& r, std::int64_t topk, double capacity_factor, DropPolicy policy,
                        bool pad_to_capacity) {
  const std::int64_t t_count = r.tokens, e = r.experts;
  const std::int64_t capacity = expert_capacity(t_count, topk, e, capacity_factor);
  std::vector<std::uint8_t> keep(r.map.size(), 1);
  if (capacity <= t_count) {
    std::fill(keep.begin(), keep.end(), 0);
    std::vector<std::int64_t> order(static_cast<std::size_t>(t_count));
    for (std::int64_t x = 0; x < e; ++x) {
      auto at = [&](std::int64_t t) { return static_cast<std::size_t>(t * e + x); };
      std::iota(order.begin(), order.end(), 0);
      // probs: the largest probabilities; position: routed tokens in order (then the rest, in
      // order, as padding). Ties go to the earlier token.
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return policy == DropPolicy::probs ? r.probs[at(a)] > r.probs[at(b)]
                                           : r.map[at(a)] > r.map[at(b)];
      });
      for (std::int64_t j = 0; j < capacity; ++j)
        keep[at(order[static_cast<std::size_t>(j)])] = 1;
    }
  }
  for (std::size_t k = 0; k < keep.size(); ++k) {
    r.map[k] = pad_to_capacity ? keep[k] : static_cast<std::uint8_t>(r.map[k] && keep[k]);
    if (!r.map[k]) r.probs[k] = 0;
  }
}

std::vector<double> aux_tokens_per_expert(const RoutingConfig& c, const double* logits,
                                          std::int64_t tokens, std::int64_t groups) {
  check(c);
  const std::int64_t e = c.num_experts;
  std::vector<double> counts(static_cast<std::size_t>(groups * e), 0.0);
  std::vector<double> s(static_cast<std::size_t>(e));
  for (std::int64_t t = 0; t < tokens; ++t) {
    aux_scores(c, logits + t * e, s.data());
    for (const std::int64_t i : top_indices(s, c.topk))
      counts[static_cast<std::size_t>((t % groups) * e + i)] += 1;
  }
  return counts;
}

double load_balancing_loss(const RoutingConfig& c, const double* logits, std::int64_t tokens,
                           std::int64_t groups, const std::vector<double>& counts,
                           double total_tokens_per_group, double coeff, double grad_scale,
                           double* dlogits) {
  const std::int64_t e = c.num_experts;
  const double factor = coeff * static_cast<double>(e) /
                        (static_cast<double>(c.topk) * total_tokens_per_group *
                         total_tokens_per_group * static_cast<double>(groups));
  double loss = 0;
  std::vector<double> s(static_cast<std::size_t>(e)), ds(static_cast<std::size_t>(e));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* count = counts.data() + (t % groups) * e;
    aux_scores(c, logits + t * e, s.data());
    for (std::int64_t i = 0; i < e; ++i) {
      loss += s[static_cast<std::size_t>(i)] * count[i] * factor;
      ds[static_cast<std::size_t>(i)] = grad_scale * count[i] * factor;
    }
    if (dlogits) aux_scores_backward(c, logits + t * e, s.data(), ds.data(), dlogits + t * e);
  }
  return loss;
}

double z_loss(const double* logits, std::int64_t tokens, std::int64_t experts, double coeff,
              double grad_scale, double* dlogits) {
  double sum = 0;
  std::vector<double> p(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* l = logits + t * experts;
    const double m = *std::max_element(l, l + experts);
    double z = 0;
    for (std::int64_t i = 0; i < experts; ++i)
      z += std::exp(l[i] - m);
    const double lse = m + std::log(z);
    sum += lse * lse;
    if (!dlogits) continue;
    softmax(l, experts, p.data());
    const double g = grad_scale * coeff * 2 * lse / static_cast<double>(tokens);
    for (std::int64_t i = 0; i < experts; ++i)
      dlogits[t * experts + i] += g * p[static_cast<std::size_t>(i)];
  }
  return coeff * sum / static_cast<double>(tokens);
}

void update_expert_bias(std::vector<float>& bias, const std::vector<double>& tokens_per_expert,
                        double rate) {
  // The counts are whole numbers, so the mean and the offsets' signs are exact in fp64.
  const double mean = std::accumulate(tokens_per_expert.begin(), tokens_per_expert.end(), 0.0) /
                      static_cast<double>(tokens_per_expert.size());
  const auto step = static_cast<float>(rate);
  for (std::size_t i = 0; i < bias.size(); ++i) {
    const double offset = mean - tokens_per_expert[i];
    bias[i] += step * static_cast<float>((offset > 0) - (offset < 0));
  }
}

}  // namespace megatron::nn::moe
