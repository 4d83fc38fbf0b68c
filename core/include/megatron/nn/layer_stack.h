// A stack of transformer layers as one rank holds it: the layers of its pipeline chunks, declared
// from per-layer specs, run forward and backward with activation recomputation and the training
// loop's parameter hooks. Every model's layer loop is this one.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "megatron/model.h"
#include "megatron/nn/layer.h"
#include "megatron/nn/model_config.h"

namespace megatron::nn {

class LayerStack {
 public:
  using SpecFn = std::function<LayerSpec(std::int64_t layer)>;

  // Declares the layers of `chunks` (global layer numbers; empty = every layer) of a stack of
  // config.transformer.num_layers layers named `<prefix>.<N>`, each from spec(N). Layer N's
  // dropout sites follow those of layers 0..N-1 (Layer::dropout_sites of each spec,
  // from first_dropout_site) whether this rank holds the layers before it or not. Recomputation
  // units follow config's recompute_* keys per chunk (Megatron applies recompute_method per
  // pipeline stage).
  void declare(ParamFactory& factory, const std::string& prefix, const ModelConfig& config,
               const SpecFn& spec, const std::vector<LayerRange>& chunks,
               std::uint64_t first_dropout_site);
  // Dropout sites the whole stack uses (the next free site is first_dropout_site + this).
  std::uint64_t dropout_sites() const;

  // What backward needs from one forward of a chunk.
  struct State {
    std::vector<Layer::Saved> saved;  // per layer of the chunk
    std::vector<Tensor> unit_inputs;  // per recomputation unit
  };
  // Runs the layers of chunk `chunk` on x (S, B, h) (sequence shards under sequence
  // parallelism); with `keep`, what backward needs goes into `state`. Each layer's parameters go
  // to options.params_needed first.
  Tensor forward(const LayerContext& ctx, int chunk, Tensor x, const LayerInputs& inputs, bool keep,
                 State& state, const StepOptions& options) const;
  // Backward through the chunk's layers, recomputing where planned; reports each layer's
  // parameters to options.grads_ready as soon as their gradients are final. Returns dx.
  Tensor backward(const LayerContext& ctx, int chunk, Tensor dy, const LayerInputs& inputs,
                  State& state, const StepOptions& options) const;

  // Every held layer's Layer::end_training_iteration, in layer order.
  void end_training_iteration(Backend& backend, Communicator* data);

  // Incremental decoding of the layers this rank holds (any chunks): whether every held layer
  // can, the caches (one entry per layer of the model, empty for layers held elsewhere), and the
  // layers of chunk `chunk` in order on the next tokens (Layer::forward_cached).
  bool can_decode() const;
  std::vector<Layer::Caches> start_caches(Backend& backend, std::int64_t batch,
                                          std::int64_t max_tokens, DType dtype) const;
  Tensor forward_cached(const LayerContext& ctx, int chunk, Tensor x, const LayerInputs& inputs,
                        std::vector<Layer::Caches>& caches, std::int64_t past) const;
  // Layer::forward_ragged layer by layer through chunk `chunk`: caches[b] are sequence b's.
  Tensor forward_ragged(const LayerContext& ctx, int chunk, Tensor x, const LayerInputs& shared,
                        const std::vector<LayerInputs>& columns,
                        const std::vector<std::vector<Layer::Caches>*>& caches,
                        std::span<const std::int64_t> past) const;

  const std::vector<LayerRange>& chunks() const { return chunks_; }
  // The parameters of layer `layer` (empty when this rank does not hold it).
  const std::vector<Parameter*>& params_of(std::int64_t layer) const;
  // Layer `layer` (declared only when this rank holds it).
  const Layer& layer(std::int64_t layer) const {
    return layers_.at(static_cast<std::size_t>(layer));
  }

 private:
  // Consecutive layers run as one unit; `recompute` ones keep only their input in forward.
  struct Unit {
    std::int64_t begin = 0, end = 0;
    bool recompute = false;
  };
  static std::vector<Unit> plan_units(const LayerRange& range, const ModelConfig& config);

  std::int64_t num_layers_ = 0;
  std::uint64_t total_sites_ = 0;
  std::vector<Layer> layers_;  // by global layer number; only held ones declared
  std::vector<std::vector<Parameter*>> layer_params_;
  std::vector<LayerRange> chunks_;
  std::vector<std::vector<Unit>> units_;  // per chunk
};

}  // namespace megatron::nn
