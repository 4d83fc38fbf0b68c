// Megatron's language-model embedding: word embeddings plus optional learned absolute positions
// plus optional token types (BERT's segments), then dropout; activations come out in (S, B, h).
// Under tensor parallelism the word embedding is vocabulary-parallel (Megatron's
// VocabParallelEmbedding).
#pragma once

#include <string>

#include "megatron/nn/init.h"
#include "megatron/nn/layer_context.h"

namespace megatron::nn {

class Embedding {
 public:
  // max_positions = 0: no position embedding table (rotary or none); num_tokentypes = 0: no
  // token-type table. The factory's tensor-parallel size must divide vocab_size (the caller pads
  // it).
  void declare(ParamFactory& factory, const std::string& prefix, std::int64_t vocab_size,
               std::int64_t hidden, std::int64_t max_positions, float init_std, float dropout,
               std::int64_t num_tokentypes = 0);
  // ids (S, B) i32 contiguous, the whole micro-batch on every rank -> y (S, B, h), or this
  // rank's (S / tp, B, h) sequence shard under sequence parallelism. Each rank looks up the ids
  // of its vocabulary slice (others give zero rows) and the partial sums are all-reduced
  // (reduce-scattered along the sequence under sequence parallelism).
  // `types` (S, B) i32 on the backend's device: the token type of each id (with a token-type
  // table; nullptr without). `position_ids` (S, B) i32 on the backend's device: each token's
  // position (GPT's reset_position_ids); nullptr: the token's index in its sequence.
  void forward(const LayerContext& ctx, const Tensor& ids, std::uint64_t dropout_site, Tensor& y,
               const Tensor* types = nullptr, const Tensor* position_ids = nullptr) const;
  // Accumulates the table gradients from dy (shaped as forward's y).
  void backward(const LayerContext& ctx, const Tensor& ids, std::uint64_t dropout_site,
                const Tensor& dy, const Tensor* types = nullptr,
                const Tensor* position_ids = nullptr) const;

  Parameter* word_embeddings = nullptr;       // (V, h) globally; rows [rank V/tp, (rank+1) V/tp)
  Parameter* position_embeddings = nullptr;   // (max_positions, h) or none; replicated
  Parameter* tokentype_embeddings = nullptr;  // (num_tokentypes, h) or none; replicated

  // First vocabulary id of this rank's slice of the word embeddings.
  std::int64_t vocab_start() const;

 private:
  // out (N, h) = this rank's word-embedding rows of ids (zero outside its slice), widened to
  // out's dtype when the table is held narrower (bf16 weights for generation).
  void lookup_words(Backend& be, const Tensor& ids, Tensor& out) const;
  // (rows) i32 on the backend's device for the `rows` token rows starting at global row
  // `first_row`: row i -> i / B.
  Tensor positions(Backend& backend, const Tensor& ids, std::int64_t first_row,
                   std::int64_t rows) const;
  // The positions of this rank's `local_rows` rows: from position_ids when given, else by index.
  Tensor local_positions(Backend& backend, const Tensor& ids, const Tensor* position_ids,
                         std::int64_t local_rows) const;
  // The rows of a replicated per-row table (positions, token types) this rank adds: all rows, or
  // its sequence shard's under sequence parallelism.
  Tensor local_rows_of(const Tensor& per_row, std::int64_t first, std::int64_t rows) const;
  float dropout_ = 0;
  TensorParallelism tp_;
};

}  // namespace megatron::nn
