// One layer of a stack: its spec's blocks in order, each x += Dropout(Mixer(Norm(x))) with
// Megatron's bias-dropout-add residual. What the layer saves is what its blocks save.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "megatron/nn/block.h"
#include "megatron/nn/norm.h"
#include "megatron/nn/tensor_parallel.h"

namespace megatron::nn {

class Layer {
 public:
  // Activations backward needs; empty after a forward without `keep` (recomputed layers).
  struct Saved {
    struct Block {
      Tensor x;  // the block's input (S, B, h)
      Norm::Saved norm;
      Tensor normed;  // the mixer's input; x itself without a norm
      std::unique_ptr<Mixer::Saved> mixer;
    };
    std::vector<Block> blocks;
    bool valid = false;
  };

  // Dropout sites a layer of `spec` uses: each block's mixer's, then its hidden dropout (see
  // BlockSpec::first_site).
  static std::uint64_t dropout_sites(const LayerSpec& spec);
  // The layer's dropout sites are first_dropout_site + [0, dropout_sites(spec)), allocated by
  // whoever declares the model (a layer never shares another's streams).
  void declare(ParamFactory& factory, const std::string& prefix, const TransformerConfig& config,
               const LayerSpec& spec, std::uint64_t first_dropout_site);
  // x, y (S, B, h), or (S / tp, B, h) sequence shards under sequence parallelism; saved is filled
  // only when `keep`.
  void forward(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs, Tensor& y,
               Saved& saved, bool keep) const;
  // Needs a saved forward; dx (S, B, h) overwritten; releases `saved`.
  void backward(const LayerContext& ctx, const Tensor& dy, const LayerInputs& inputs, Saved& saved,
                Tensor& dx) const;

  // Each block's Mixer::end_training_iteration, in order.
  void end_training_iteration(Backend& backend, Communicator* data);

  // Incremental decoding: `none` when a block cannot decode (nor can the layer), `cached` when a
  // block keeps a cache, else `stateless`.
  Mixer::Decoding decoding() const;
  using Caches = std::vector<std::unique_ptr<Mixer::Cache>>;  // per block; null: stateless
  Caches start_caches(Backend& backend, std::int64_t batch, std::int64_t max_tokens,
                      DType dtype) const;
  // Evaluation mode: x, y (S_new, B, h) the tokens after the `past` ones the caches hold, each
  // block x + Mixer(Norm(x)) with the mixer's forward (stateless) or forward_cached.
  void forward_cached(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                      Caches& caches, std::int64_t past, Tensor& y) const;
  // Continuous batching: x, y (1, n, h) one new token of each of n sequences, each with its own
  // caches (one sequence each) and past. Norms and stateless mixers run on the n rows together;
  // a cached mixer runs each sequence on its own caches, with `columns[b]` as its inputs (its
  // rotary positions); stateless mixers read `shared`.
  void forward_ragged(const LayerContext& ctx, const Tensor& x, const LayerInputs& shared,
                      const std::vector<LayerInputs>& columns, const std::vector<Caches*>& caches,
                      std::span<const std::int64_t> past, Tensor& y) const;

  std::size_t num_blocks() const { return blocks_.size(); }
  // Block k's mixer, as its kind (nullptr when it is another kind).
  template <typename Kind>
  const Kind* mixer(std::size_t k) const {
    return dynamic_cast<const Kind*>(blocks_.at(k).mixer.get());
  }

 private:
  struct Block {
    Norm norm;
    bool has_norm = false;
    bool residual_from_norm = false;  // BlockSpec::residual_from_norm
    std::unique_ptr<Mixer> mixer;
    std::uint64_t first_site = 0;  // the mixer's sites, then the hidden dropout's
    std::uint64_t hidden_site = 0;
  };
  // The blocks in evaluation mode on the new tokens: norms and stateless mixers here, a cached
  // mixer's step by `cached(k, normed, out)`.
  using CachedStep = std::function<void(std::size_t, const Tensor&, Tensor&)>;
  void decode_blocks(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs, Tensor& y,
                     const CachedStep& cached) const;
  // Philox offset of a hidden-dropout site for an activation shard of `numel` elements: a
  // sequence shard continues the unsplit tensor's stream at its first element, so the masks
  // equal the single-rank run's; replicated activations use the same masks on every rank.
  std::uint64_t hidden_offset(const LayerContext& ctx, std::uint64_t site,
                              std::int64_t numel) const {
    return ctx.dropout_offset(site) + tp_sequence_offset(tp_, numel);
  }
  void forward_block(const LayerContext& ctx, const Block& block, const Tensor& x,
                     const LayerInputs& inputs, Tensor& y, Saved::Block& saved) const;
  // dy -> dx of one block, releasing its saved state.
  void backward_block(const LayerContext& ctx, const Block& block, const Tensor& dy,
                      const LayerInputs& inputs, Saved::Block& saved, Tensor& dx) const;

  float hidden_dropout_ = 0.0f;
  TensorParallelism tp_;
  std::vector<Block> blocks_;
};

}  // namespace megatron::nn
