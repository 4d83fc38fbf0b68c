// Megatron's token sampling (megatron/inference/text_generation/sampling.py and the top-p decay
// of generation.py): greedy, temperature, top-k and top-p over one row of logits, restricted to
// the real vocabulary, so a padded-vocabulary id never comes out (Megatron clamps instead).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace megatron::inference {

struct SamplingParams {
  std::int64_t top_k = 0;    // 1: greedy (argmax); > 1: the k largest logits
  double top_p = 0.0;        // (0, 1]: the smallest set of largest probabilities reaching top_p
  double temperature = 1.0;  // logits divided by it before top-k / top-p (not for greedy)
  double top_p_decay = 0.0;  // after each token top_p *= top_p_decay ...
  double top_p_bound = 0.0;  // ... but not below top_p_bound
};

// "" when the parameters are valid for a vocabulary of `vocab_size`, else Megatron's message
// naming the field (the REST server's checks: temperature in (0, 100], top_k in [0, 1000] and
// below the vocabulary, top_p in [0, 1] and not with top_k, decay and bound only with top_p).
std::string sampling_error(const SamplingParams& params, std::int64_t vocab_size);

// One token from `logits` (a row of the padded vocabulary; only ids [0, vocab_size) are
// considered). `uniform` in [0, 1) draws it from the filtered distribution (ignored by greedy):
// the request's own random stream, so a request samples the same tokens alone or in a batch.
// The candidates are taken in order of falling probability (ties by id) for the draw.
std::int32_t sample_token(std::span<const float> logits, std::int64_t vocab_size,
                          const SamplingParams& params, double uniform);

// top_p after one generated token (Megatron's decay and bound).
double decayed_top_p(const SamplingParams& params, double top_p);

}  // namespace megatron::inference
