// The interface of dataset plugins: train/valid/test samples of fixed length and the tokenizer
// they were made with.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "megatron/data/split.h"
#include "megatron/plugin.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron {

class Dataset : public Plugin {
 public:
  ~Dataset() override;
  // Builds the splits so each has at least `num_samples[split]` samples (Megatron's
  // train_val_test_num_samples; 0 = the split is not used).
  virtual void build(const std::array<std::int64_t, 3>& num_samples) = 0;
  virtual std::int64_t size(data::Split split) const = 0;
  virtual std::int64_t seq_length() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // Sample `index` of `split`: tokens and labels (seq_length each: labels are the tokens shifted
  // by one) and loss_mask (1 = counted). Thread-safe.
  virtual void get(data::Split split, std::int64_t index, std::span<std::int32_t> tokens,
                   std::span<std::int32_t> labels, std::span<float> loss_mask) const = 0;
};

}  // namespace megatron
