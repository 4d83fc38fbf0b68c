// The floating-point rules behind the masked datasets' n-gram sizes: numpy's float64 sum and the
// size probabilities Megatron normalises with it (shared by the masking code and its tests).
#pragma once

#include <span>
#include <vector>

#include "megatron/data/masked_samples.h"

namespace megatron::data {

// numpy's sum of a 1-D float64 array: pairwise summation (blocks of 8 partial sums up to 128
// values, halves beyond), added to 0. Other orders round differently.
double numpy_sum(std::span<const double> values);

// P(n) for n = 1..masking_max_ngram as Megatron computes it: 1/n normalised, reversed with
// masking_use_longer_ngrams, then normalised again before choice.
std::vector<double> ngram_probabilities(const MaskingOptions& options);

}  // namespace megatron::data
