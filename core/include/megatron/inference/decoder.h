// How the generation engine gets logits from a decoder-only language model: a Decoder keeps each
// sequence's state and gives the logits after a prompt (prefill) and after one more token of
// several sequences at once (a continuous-batching step). Two kinds: the KV cache (the model's
// incremental decoding) and recomputing each whole sequence (any model; the reference path).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "megatron/model.h"
#include "megatron/nn/language_model.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::inference {

class Decoder {
 public:
  struct Sequence {
    virtual ~Sequence() = default;
  };
  virtual ~Decoder() = default;
  // The longest sequence (prompt and generated tokens) a state holds.
  virtual std::int64_t max_tokens() const = 0;
  virtual std::unique_ptr<Sequence> start() = 0;
  // The logits (padded vocab) on the host after the prompt's last id, or (every_position) after
  // each of its ids, (S, padded vocab).
  virtual Tensor prefill(Sequence& seq, std::span<const TokenId> prompt, bool every_position) = 0;
  // One more token of each sequence (sequences[b] gets tokens[b]) -> logits (n, padded vocab).
  virtual Tensor step(std::span<Sequence* const> sequences, std::span<const TokenId> tokens) = 0;
};

// The model's KV cache (LanguageModel::decode / decode_ragged); needs lm.can_decode().
std::unique_ptr<Decoder> kv_cache_decoder(nn::LanguageModel& lm, std::int64_t max_tokens);

// The whole sequence through LanguageModel::logits at every step: micro-batches of `fields`
// (the dataset's) of seq_length tokens, padded with `pad` after the real ones (every mixer is
// causal, so the padding does not reach their logits).
std::unique_ptr<Decoder> recomputing_decoder(nn::LanguageModel& lm, SampleSpec fields,
                                             std::int64_t seq_length, TokenId pad);

}  // namespace megatron::inference
