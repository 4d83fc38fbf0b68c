// MaskedWordPieceDataset._create_masked_lm_predictions: word candidates, n-gram choice, masking
// budget and replacements, with every numpy RandomState draw in Megatron's order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/masked_ngram_rules.h"
#include "megatron/data/masked_samples.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {

double pairwise_sum(const double* values, std::size_t n) {
  if (n < 8) {
    double sum = 0.0;
    for (std::size_t i = 0; i < n; ++i)
      sum += values[i];
    return sum;
  }
  if (n <= 128) {
    double partial[8];
    for (std::size_t j = 0; j < 8; ++j)
      partial[j] = values[j];
    std::size_t i = 8;
    for (; i < n - n % 8; i += 8) {
      for (std::size_t j = 0; j < 8; ++j)
        partial[j] += values[i + j];
    }
    double sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                 ((partial[4] + partial[5]) + (partial[6] + partial[7]));
    for (; i < n; ++i)
      sum += values[i];
    return sum;
  }
  std::size_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(values, half) + pairwise_sum(values + half, n - half);
}

// Word candidates: groups of token positions masked together. CLS and SEP belong to none; a
// "##" piece joins the previous group with whole-word masking (even across a SEP, as in
// Megatron), otherwise it is a group of its own.
struct Candidates {
  std::vector<std::vector<std::int64_t>> groups;
  std::vector<std::int64_t> boundaries;
};

Candidates word_candidates(std::span<const std::int64_t> tokens, bool full_word,
                           const WordPieceVocabulary& vocabulary) {
  Candidates out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int64_t id = tokens[i];
    const auto position = static_cast<std::int64_t>(i);
    if (id == vocabulary.cls || id == vocabulary.sep) {
      out.boundaries.push_back(1);
      continue;
    }
    if (id < 0 || static_cast<std::size_t>(id) >= vocabulary.continues_word.size()) {
      throw Error("masking: token id " + std::to_string(id) + " at position " + std::to_string(i) +
                  " is outside the vocabulary of " +
                  std::to_string(vocabulary.continues_word.size()) + " ids");
    }
    if (!vocabulary.continues_word[static_cast<std::size_t>(id)]) {
      out.boundaries.push_back(1);
      out.groups.push_back({position});
    } else {
      out.boundaries.push_back(0);
      if (full_word && !out.groups.empty()) {
        out.groups.back().push_back(position);
      } else {
        out.groups.push_back({position});
      }
    }
  }
  return out;
}

// The positions of the n-gram of `n` groups starting at group `first` (fewer groups near the
// end: Megatron slices candidates[first:first + n]).
std::vector<std::int64_t> ngram_positions(const Candidates& candidates, std::size_t first,
                                          std::int64_t n) {
  std::vector<std::int64_t> out;
  const std::size_t end = std::min(candidates.groups.size(), first + static_cast<std::size_t>(n));
  for (std::size_t g = first; g < end; ++g)
    out.insert(out.end(), candidates.groups[g].begin(), candidates.groups[g].end());
  return out;
}

// The while-loop after the size draw: the largest n-gram up to `n` groups that still fits the
// budget, or nothing when even one group does not.
std::optional<std::vector<std::int64_t>> fitting_ngram(const Candidates& candidates,
                                                       std::size_t first, std::int64_t n,
                                                       double budget, std::size_t used) {
  while (true) {
    std::vector<std::int64_t> positions = ngram_positions(candidates, first, n);
    --n;
    if (budget >= static_cast<double>(used + positions.size())) return positions;
    if (n == 0) return std::nullopt;
  }
}

std::int64_t ngram_size(const MaskingOptions& options, std::span<const double> probabilities,
                        NumpyRandomState& random) {
  if (options.masking_use_geometric_distribution) {
    // SpanBERT: geometric with p = 0.2, clipped.
    return std::min(random.geometric(0.2), options.masking_max_ngram);
  }
  return static_cast<std::int64_t>(random.choice(probabilities)) + 1;
}

// BERT's _get_token_mask: nullopt leaves the token as it was.
std::optional<std::int64_t> replacement_token(MaskReplacement replacement,
                                              const WordPieceVocabulary& vocabulary,
                                              NumpyRandomState& random) {
  if (replacement == MaskReplacement::kAlwaysMask) return vocabulary.mask;
  if (random.random() < 0.8) return vocabulary.mask;
  if (random.random() >= 0.5) {
    const auto size = static_cast<std::int64_t>(vocabulary.token_lookup.size());
    return vocabulary.token_lookup[static_cast<std::size_t>(random.randint(0, size))];
  }
  return std::nullopt;
}

}  // namespace

double numpy_sum(std::span<const double> values) {
  return 0.0 + pairwise_sum(values.data(), values.size());
}

std::vector<double> ngram_probabilities(const MaskingOptions& options) {
  std::vector<double> p(static_cast<std::size_t>(options.masking_max_ngram));
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = 1.0 / static_cast<double>(i + 1);
  double total = numpy_sum(p);
  for (double& x : p)
    x /= total;
  if (options.masking_use_longer_ngrams) std::reverse(p.begin(), p.end());
  total = numpy_sum(p);
  for (double& x : p)
    x /= total;
  return p;
}

void check_masking_options(const MaskingOptions& options) {
  if (!(options.masking_probability > 0.0 && options.masking_probability < 1.0)) {
    throw ConfigError("masking_probability must be in (0, 1), found " +
                      std::to_string(options.masking_probability));
  }
  if (options.masking_max_ngram <= 0) {
    throw ConfigError("masking_max_ngram must be positive, found " +
                      std::to_string(options.masking_max_ngram));
  }
  if (options.masking_use_geometric_distribution && options.masking_do_permutation) {
    throw ConfigError(
        "masking_use_geometric_distribution and masking_do_permutation cannot both be on");
  }
}

std::vector<std::uint8_t> continues_word_table(std::span<const std::string> vocabulary) {
  std::vector<std::uint8_t> out(vocabulary.size());
  for (std::size_t i = 0; i < vocabulary.size(); ++i)
    out[i] = vocabulary[i].starts_with("##") ? 1 : 0;
  return out;
}

MaskedLmPredictions create_masked_lm_predictions(
    std::span<const std::int64_t> token_ids, std::int64_t target_sequence_length,
    const MaskingOptions& options, const WordPieceVocabulary& vocabulary,
    MaskReplacement replacement, NumpyRandomState& random, NumpyRandomState* global_random) {
  check_masking_options(options);
  if (replacement == MaskReplacement::kBert && vocabulary.token_lookup.empty()) {
    throw Error("masking: BERT's random replacement needs a non-empty token lookup");
  }
  if (options.masking_do_permutation && global_random == nullptr) {
    throw Error("masking: masking_do_permutation draws from numpy's global RandomState; pass one");
  }
  Candidates candidates = word_candidates(token_ids, options.masking_do_full_word, vocabulary);

  // The budget stays a float: min(p * target, max(1, round-half-even(len * p))).
  const double p = options.masking_probability;
  const double rounded = std::nearbyint(static_cast<double>(token_ids.size()) * p);
  const double budget =
      std::min(p * static_cast<double>(target_sequence_length), std::max(1.0, rounded));

  const std::vector<double> probabilities = ngram_probabilities(options);
  // Megatron shuffles the candidates' n-gram lists; each is known by its first group.
  std::vector<std::size_t> order(candidates.groups.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  random.shuffle(std::span(order));

  MaskedLmPredictions out;
  out.tokens.assign(token_ids.begin(), token_ids.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> masked;  // (position, original id)
  std::vector<std::uint8_t> is_masked(token_ids.size(), 0);
  for (const std::size_t first : order) {
    if (static_cast<double>(masked.size()) >= budget) break;
    const std::int64_t n = ngram_size(options, probabilities, random);
    const auto positions = fitting_ngram(candidates, first, n, budget, masked.size());
    if (!positions) continue;
    const bool overlaps = std::any_of(positions->begin(), positions->end(), [&](std::int64_t i) {
      return is_masked[static_cast<std::size_t>(i)] != 0;
    });
    if (overlaps) continue;
    MaskedSpan span;
    for (const std::int64_t position : *positions) {
      const auto i = static_cast<std::size_t>(position);
      is_masked[i] = 1;
      out.tokens[i] = replacement_token(replacement, vocabulary, random).value_or(token_ids[i]);
      masked.emplace_back(position, token_ids[i]);
      span.positions.push_back(position);
      span.labels.push_back(token_ids[i]);
    }
    out.spans.push_back(std::move(span));
  }

  // Megatron shuffles the n-gram lists again whether or not it permutes.
  random.shuffle(std::span(order));

  if (options.masking_do_permutation) {
    const double swaps = budget;
    std::vector<std::uint8_t> is_permuted(token_ids.size(), 0);
    std::size_t permuted_count = 0;
    for (const std::size_t first : order) {
      if (static_cast<double>(permuted_count) >= swaps) break;
      // Megatron draws this size from numpy.random (the global state), not the sample's.
      const auto n = static_cast<std::int64_t>(global_random->choice(probabilities)) + 1;
      const auto positions = fitting_ngram(candidates, first, n, swaps, permuted_count);
      if (!positions) continue;
      const bool taken = std::any_of(positions->begin(), positions->end(), [&](std::int64_t i) {
        const auto k = static_cast<std::size_t>(i);
        return is_masked[k] != 0 || is_permuted[k] != 0;
      });
      if (taken) continue;
      for (const std::int64_t position : *positions) {
        const auto k = static_cast<std::size_t>(position);
        permuted_count += is_permuted[k] ? 0 : 1;
        is_permuted[k] = 1;
      }
    }
    std::vector<std::int64_t> sorted;
    for (std::size_t i = 0; i < is_permuted.size(); ++i) {
      if (is_permuted[i]) sorted.push_back(static_cast<std::int64_t>(i));
    }
    std::vector<std::int64_t> shuffled = sorted;
    random.shuffle(std::span(shuffled));
    const std::vector<std::int64_t> before = out.tokens;
    for (std::size_t k = 0; k < sorted.size(); ++k) {
      const auto to = static_cast<std::size_t>(sorted[k]);
      out.tokens[to] = before[static_cast<std::size_t>(shuffled[k])];
      masked.emplace_back(sorted[k], before[to]);
    }
  }

  std::stable_sort(masked.begin(), masked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [position, label] : masked) {
    out.positions.push_back(position);
    out.labels.push_back(label);
  }
  std::stable_sort(out.spans.begin(), out.spans.end(),
                   [](const MaskedSpan& a, const MaskedSpan& b) {
                     return a.positions.front() < b.positions.front();
                   });
  out.boundaries = std::move(candidates.boundaries);
  return out;
}

}  // namespace megatron::data
