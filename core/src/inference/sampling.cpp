// Token sampling as Megatron's sampling.py, on the host over one row of logits.
#include "megatron/inference/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "megatron/error.h"

namespace megatron::inference {

std::string sampling_error(const SamplingParams& p, std::int64_t vocab_size) {
  if (!(p.temperature > 0.0 && p.temperature <= 100.0))
    return "temperature must be a positive number less than or equal to 100.0";
  if (p.top_k < 0 || p.top_k > 1000)
    return "top_k must be equal to or greater than 0 and less than or equal to 1000";
  if (p.top_k > 1 && p.top_k >= vocab_size) {
    return "top_k must be less than the vocabulary size (" + std::to_string(vocab_size) + ")";
  }
  if (!(p.top_p >= 0.0 && p.top_p <= 1.0)) return "top_p must be less than or equal to 1.0";
  if (p.top_p > 0.0 && p.top_k > 0) return "cannot set both top-k and top-p samplings.";
  if (p.top_p_decay != 0.0) {
    if (p.top_p == 0.0) return "top_p_decay cannot be set without top_p";
    if (!(p.top_p_decay >= 0.0 && p.top_p_decay <= 1.0))
      return "top_p_decay must be less than or equal to 1.0";
  }
  if (p.top_p_bound != 0.0) {
    if (p.top_p == 0.0) return "top_p_bound cannot be set without top_p";
    if (!(p.top_p_bound > 0.0 && p.top_p_bound <= p.top_p))
      return "top_p_bound must be greater than 0 and less than top_p";
  }
  return "";
}

double decayed_top_p(const SamplingParams& p, double top_p) {
  if (top_p > 0.0 && p.top_p_decay > 0.0) {
    top_p *= p.top_p_decay;
    if (p.top_p_bound > 0.0) top_p = std::max(top_p, p.top_p_bound);
  }
  return top_p;
}

std::int32_t sample_token(std::span<const float> logits, std::int64_t vocab_size,
                          const SamplingParams& p, double uniform) {
  if (vocab_size <= 0 || static_cast<std::size_t>(vocab_size) > logits.size()) {
    throw Error("sample_token: a vocabulary of " + std::to_string(vocab_size) + " in " +
                std::to_string(logits.size()) + " logits");
  }
  const auto n = static_cast<std::size_t>(vocab_size);
  if (p.top_k == 1) {  // greedy: the first largest, as torch.argmax
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.begin() + n) -
                                     logits.begin());
  }
  // Falling logit (ties by id): the order of the top-k cut, of the top-p cumulative sums and of
  // the draw. Temperature scales every logit alike, so it does not change the order.
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> scaled(n);
  for (std::size_t i = 0; i < n; ++i)
    scaled[i] = static_cast<double>(logits[order[i]]) / p.temperature;
  std::size_t kept = n;
  if (p.top_k > 1) {
    // Megatron removes the logits below the k-th largest: ties with it stay.
    kept = static_cast<std::size_t>(p.top_k);
    while (kept < n && scaled[kept] == scaled[kept - 1])
      ++kept;
  }
  // Softmax over the kept candidates (the max first, in double).
  std::vector<double> probs(kept);
  double total = 0.0;
  for (std::size_t i = 0; i < kept; ++i)
    total += probs[i] = std::exp(scaled[i] - scaled[0]);
  if (p.top_p > 0.0) {
    // The candidate whose preceding cumulative probability already exceeds top_p is removed
    // (Megatron's filter shifted by one), so the first always stays.
    double before = 0.0;
    std::size_t cut = 0;
    while (cut < kept && !(before > p.top_p))
      before += probs[cut++] / total;
    kept = std::max<std::size_t>(cut, 1);
    total = std::accumulate(probs.begin(), probs.begin() + static_cast<std::ptrdiff_t>(kept), 0.0);
  }
  double target = uniform * total;
  for (std::size_t i = 0; i < kept; ++i) {
    target -= probs[i];
    if (target < 0.0) return order[i];
  }
  return order[kept - 1];  // rounding at uniform close to 1
}

}  // namespace megatron::inference
