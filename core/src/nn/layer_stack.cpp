// The layer loop shared by every model: declaration by chunk, recomputation units, forward and
// backward with the params_needed / grads_ready hooks.
#include "megatron/nn/layer_stack.h"

#include <algorithm>

#include "megatron/error.h"

namespace megatron::nn {

void LayerStack::end_training_iteration(Backend& backend, Communicator* data) {
  for (Layer& layer : layers_)
    layer.end_training_iteration(backend, data);
}

void LayerStack::declare(ParamFactory& factory, const std::string& prefix,
                         const ModelConfig& config, const SpecFn& spec,
                         const std::vector<LayerRange>& chunks, std::uint64_t first_dropout_site) {
  num_layers_ = config.transformer.num_layers;
  chunks_ = chunks.empty() ? std::vector<LayerRange>{{0, num_layers_}} : chunks;
  layers_.clear();
  layers_.resize(static_cast<std::size_t>(num_layers_));
  layer_params_.assign(layers_.size(), {});
  units_.clear();
  // Every layer's sites are numbered whether this rank holds it or not.
  std::vector<std::uint64_t> first_site(layers_.size());
  total_sites_ = 0;
  for (std::int64_t i = 0; i < num_layers_; ++i) {
    first_site[static_cast<std::size_t>(i)] = first_dropout_site + total_sites_;
    total_sites_ += Layer::dropout_sites(spec(i));
  }
  for (const LayerRange& r : chunks_) {
    if (r.count < 1 || r.first < 0 || r.first + r.count > num_layers_) {
      throw Error("pipeline chunk of layers [" + std::to_string(r.first) + ", " +
                  std::to_string(r.first + r.count) + ") outside the model's " +
                  std::to_string(num_layers_) + " layers");
    }
    for (std::int64_t i = r.first; i < r.first + r.count; ++i) {
      const std::size_t before = factory.params.size();
      const auto l = static_cast<std::size_t>(i);
      layers_[l].declare(factory, prefix + "." + std::to_string(i), config.transformer, spec(i),
                         first_site[l]);
      for (std::size_t k = before; k < factory.params.size(); ++k)
        layer_params_[l].push_back(&factory.params[k]);
    }
    units_.push_back(plan_units(r, config));
  }
}

std::uint64_t LayerStack::dropout_sites() const {
  return total_sites_;
}

const std::vector<Parameter*>& LayerStack::params_of(std::int64_t layer) const {
  return layer_params_.at(static_cast<std::size_t>(layer));
}

std::vector<LayerStack::Unit> LayerStack::plan_units(const LayerRange& range,
                                                     const ModelConfig& config) {
  const std::int64_t first = range.first, end = range.first + range.count;
  const std::int64_t n = config.recompute_num_layers;
  std::vector<Unit> units;
  const bool full = config.recompute_granularity == Recompute::full;
  if (full && config.recompute_method == RecomputeMethod::uniform) {
    for (std::int64_t b = first; b < end; b += n)
      units.push_back({b, std::min(end, b + n), true});
  } else {
    // Block: the first n layers (of this stage) are recomputed one by one; selective recomputes
    // nothing here because the fused attention never stores the S x S probabilities Megatron's
    // selective mode exists to drop.
    for (std::int64_t i = first; i < end; ++i)
      units.push_back({i, i + 1, full && i - first < n});
  }
  return units;
}

Tensor LayerStack::forward(const LayerContext& ctx, int chunk, Tensor x, const LayerInputs& inputs,
                           bool keep, State& state, const StepOptions& options) const {
  const LayerRange& range = chunks_.at(static_cast<std::size_t>(chunk));
  const std::vector<Unit>& units = units_[static_cast<std::size_t>(chunk)];
  state.saved.clear();
  state.saved.resize(static_cast<std::size_t>(range.count));
  state.unit_inputs.assign(units.size(), {});
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (keep) state.unit_inputs[u] = x;
    const bool keep_layers = keep && !units[u].recompute;
    for (std::int64_t l = units[u].begin; l < units[u].end; ++l) {
      if (options.params_needed) options.params_needed(layer_params_[static_cast<std::size_t>(l)]);
      Tensor y = ctx.backend.empty(x.shape(), x.dtype());
      layers_[static_cast<std::size_t>(l)].forward(
          ctx, x, inputs, y, state.saved[static_cast<std::size_t>(l - range.first)], keep_layers);
      x = y;
    }
  }
  return x;
}

bool LayerStack::can_decode() const {
  for (const LayerRange& r : chunks_)
    for (std::int64_t l = r.first; l < r.first + r.count; ++l)
      if (layers_[static_cast<std::size_t>(l)].decoding() == Mixer::Decoding::none) return false;
  return true;
}

std::vector<Layer::Caches> LayerStack::start_caches(Backend& backend, std::int64_t batch,
                                                    std::int64_t max_tokens, DType dtype) const {
  if (!can_decode()) throw Error("LayerStack: this stack cannot decode incrementally");
  std::vector<Layer::Caches> caches(layers_.size());
  for (const LayerRange& r : chunks_)
    for (std::int64_t l = r.first; l < r.first + r.count; ++l) {
      const auto i = static_cast<std::size_t>(l);
      caches[i] = layers_[i].start_caches(backend, batch, max_tokens, dtype);
    }
  return caches;
}

Tensor LayerStack::forward_cached(const LayerContext& ctx, int chunk, Tensor x,
                                  const LayerInputs& inputs, std::vector<Layer::Caches>& caches,
                                  std::int64_t past) const {
  if (caches.size() != layers_.size()) throw Error("LayerStack: caches of another stack");
  const LayerRange& range = chunks_.at(static_cast<std::size_t>(chunk));
  for (std::int64_t l = range.first; l < range.first + range.count; ++l) {
    const auto i = static_cast<std::size_t>(l);
    Tensor y = ctx.backend.empty(x.shape(), x.dtype());
    layers_[i].forward_cached(ctx, x, inputs, caches[i], past, y);
    x = y;
  }
  return x;
}

Tensor LayerStack::forward_ragged(const LayerContext& ctx, int chunk, Tensor x,
                                  const LayerInputs& shared,
                                  const std::vector<LayerInputs>& columns,
                                  const std::vector<std::vector<Layer::Caches>*>& caches,
                                  std::span<const std::int64_t> past) const {
  for (const auto* c : caches)
    if (!c || c->size() != layers_.size()) throw Error("LayerStack: caches of another stack");
  const LayerRange& range = chunks_.at(static_cast<std::size_t>(chunk));
  std::vector<Layer::Caches*> layer_caches(caches.size());
  for (std::int64_t l = range.first; l < range.first + range.count; ++l) {
    const auto i = static_cast<std::size_t>(l);
    for (std::size_t b = 0; b < caches.size(); ++b)
      layer_caches[b] = &(*caches[b])[i];
    Tensor y = ctx.backend.empty(x.shape(), x.dtype());
    layers_[i].forward_ragged(ctx, x, shared, columns, layer_caches, past, y);
    x = y;
  }
  return x;
}

Tensor LayerStack::backward(const LayerContext& ctx, int chunk, Tensor dy,
                            const LayerInputs& inputs, State& state,
                            const StepOptions& options) const {
  const LayerRange& range = chunks_.at(static_cast<std::size_t>(chunk));
  const std::vector<Unit>& units = units_[static_cast<std::size_t>(chunk)];
  for (std::size_t u = units.size(); u-- > 0;) {
    const Unit& unit = units[u];
    if (unit.recompute) {
      Tensor xin = state.unit_inputs[u];
      for (std::int64_t l = unit.begin; l < unit.end; ++l) {
        Tensor y = ctx.backend.empty(xin.shape(), xin.dtype());
        layers_[static_cast<std::size_t>(l)].forward(
            ctx, xin, inputs, y, state.saved[static_cast<std::size_t>(l - range.first)], true);
        xin = y;
      }
    }
    state.unit_inputs[u] = Tensor();
    for (std::int64_t l = unit.end; l-- > unit.begin;) {
      Tensor dx = ctx.backend.empty(dy.shape(), dy.dtype());
      layers_[static_cast<std::size_t>(l)].backward(
          ctx, dy, inputs, state.saved[static_cast<std::size_t>(l - range.first)], dx);
      dy = dx;
      if (options.grads_ready) options.grads_ready(layer_params_[static_cast<std::size_t>(l)]);
    }
  }
  return dy;
}

}  // namespace megatron::nn
