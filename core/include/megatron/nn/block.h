// The open layer vocabulary, in the spirit of Megatron-core's ModuleSpec / submodules: a layer is
// a sequence of pre-norm residual blocks, x + Dropout(Mixer(Norm(x))), and a block kind is any
// implementation of Mixer (self-attention, cross-attention, MLP, Mamba, a plugin's own). A spec
// carries the factory of its mixer, so a plugin adds a kind by writing the class and naming it in
// its layer specs: nothing in the core is edited or registered.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "megatron/error.h"
#include "megatron/nn/init.h"
#include "megatron/nn/layer_context.h"
#include "megatron/nn/layer_inputs.h"
#include "megatron/nn/transformer_config.h"

namespace megatron::nn {

// An activation (S, B, h) as rows (S * B, h), the layout the linear layers take.
inline Tensor rows_of(const Tensor& t) {
  return t.view({t.size(0) * t.size(1), t.size(2)});
}

// What a block runs between its norm and its dropout.
class Mixer {
 public:
  // What backward needs from one forward; a kind derives its own.
  struct Saved {
    virtual ~Saved() = default;
  };
  virtual ~Mixer() = default;

  // Dropout sites the mixer draws itself (attention probabilities), first_site + [0, n). Known
  // before declare: a stack numbers the sites of the layers its rank does not hold too.
  virtual std::uint64_t dropout_sites() const { return 0; }
  // Declares the parameters under `prefix` (decoder.layers.3.self_attention), in the order the
  // flat gradient buffers follow (Megatron's module order).
  virtual void declare(ParamFactory& factory, const std::string& prefix,
                       const TransformerConfig& config) = 0;
  // x: the block's normed input (S, B, h), an (S / tp, B, h) sequence shard under sequence
  // parallelism; y (shaped as x): the mixer's output before the block's dropout. Reads named
  // inputs from `inputs`. Returns what backward needs.
  virtual std::unique_ptr<Saved> forward(const LayerContext& ctx, const Tensor& x,
                                         const LayerInputs& inputs, std::uint64_t first_site,
                                         Tensor& y) const = 0;
  // The named inputs whose gradients backward adds, when the micro-batch has them (the layer
  // checks that each has an accumulator before any backward work).
  virtual std::vector<std::string> gradient_inputs() const { return {}; }
  // dx (shaped as x) overwritten; parameter gradients accumulated; the gradients of named inputs
  // ADDED to the accumulators in `inputs`. May release `saved`.
  virtual void backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy,
                        const LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                        Tensor& dx) const = 0;
  // Once per training iteration, after its last backward and before the optimizer step
  // (Model::end_training_iteration): per-iteration updates of the mixer's buffers. `data` is the
  // data-parallel group (null: one rank). Collective: every tensor- and data-parallel peer calls
  // it for the same layers.
  virtual void end_training_iteration(Backend& backend, Communicator* data) {
    (void)backend;
    (void)data;
  }

  // ---- incremental decoding (API 7): a generator feeds the next tokens only -----------------
  // `stateless`: the mixer mixes no positions (an MLP, MoE experts), so its forward on the new
  // tokens alone is exact; `cached`: it keeps a Cache from step to step (causal self-attention:
  // its keys and values); `none` (the default): it cannot, and the generator recomputes the whole
  // sequence each step.
  enum class Decoding { none, stateless, cached };
  virtual Decoding decoding() const { return Decoding::none; }
  struct Cache {
    virtual ~Cache() = default;
  };
  // `cached` mixers: an empty cache for `batch` sequences of up to `max_tokens` tokens.
  virtual std::unique_ptr<Cache> start_cache(Backend& backend, std::int64_t batch,
                                             std::int64_t max_tokens, DType dtype) const {
    (void)backend, (void)batch, (void)max_tokens, (void)dtype;
    throw Error("this mixer keeps no decoding cache (Mixer::decoding() is not `cached`)");
  }
  // `cached` mixers, evaluation mode: x (S_new, B, h) the normed next tokens after the `past`
  // ones `cache` holds (it holds these too afterwards); y (S_new, B, h) as forward's.
  virtual void forward_cached(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                              Cache& cache, std::int64_t past, Tensor& y) const {
    (void)ctx, (void)x, (void)inputs, (void)cache, (void)past, (void)y;
    throw Error("this mixer keeps no decoding cache (Mixer::decoding() is not `cached`)");
  }
};

// The norm in front of a block's mixer, of the stack's normalization.
struct BlockNorm {
  // `<layer>.<name>` (input_layernorm); empty: no norm (the mixer sees x itself).
  std::string name;
  // Named as Transformer Engine's fused LayerNormLinear names it, inside the linear layer it
  // feeds (`<layer>.<name>.layer_norm_weight` with name = self_attention.linear_qkv): the names of
  // Megatron-core's Mamba/hybrid checkpoints, whose specs are TE-only.
  bool fused = false;
};

struct BlockSpec {
  // The mixer's parameters are `<layer>.<name>.*` (self_attention, mlp, mixer); empty: the
  // layer's own prefix, for a kind that names several submodules itself (GPT-J's parallel
  // attention + MLP: `<layer>.self_attention.*`, `<layer>.mlp.*`).
  std::string name;
  BlockNorm norm;
  std::function<std::unique_ptr<Mixer>()> make;
  // The block's first dropout site within its layer. Unset: right after the previous block's
  // (the mixer's own sites, then the block's hidden dropout). Set by specs that keep an older
  // numbering, so the same masks are drawn as before.
  std::optional<std::uint64_t> first_site;
  // The residual the block's dropped-out output is added to: its input x (false: Megatron's
  // pre-norm bias-dropout-add), or its normed input (true: Norm(x) + Dropout(Mixer(Norm(x))), as
  // Retro's encoder cross-attention, RetroEncoderBiasDropoutAdd). Needs a norm.
  bool residual_from_norm = false;
};

// The blocks of one layer, in order.
struct LayerSpec {
  std::vector<BlockSpec> blocks;
};

}  // namespace megatron::nn
