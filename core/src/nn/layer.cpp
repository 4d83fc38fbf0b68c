// A layer as a sequence of pre-norm residual blocks: forward and backward of each block with
// Megatron's bias-dropout-add, the layer's dropout sites numbered block by block.
#include "megatron/nn/layer.h"

#include <algorithm>

#include "megatron/error.h"

namespace megatron::nn {

namespace {

std::unique_ptr<Mixer> make_mixer(const BlockSpec& spec, const std::string& layer) {
  std::unique_ptr<Mixer> mixer = spec.make ? spec.make() : nullptr;
  if (!mixer) {
    throw Error("layer " + layer + ": block '" + spec.name + "' has no mixer to make");
  }
  return mixer;
}

// Each block's first site (its mixer's sites, then its hidden dropout) and the layer's total.
template <typename Visit>
std::uint64_t number_sites(const LayerSpec& spec, const std::string& layer, Visit visit) {
  std::uint64_t next = 0, total = 0;
  for (const BlockSpec& block : spec.blocks) {
    const std::uint64_t first = block.first_site.value_or(next);
    next = first + make_mixer(block, layer)->dropout_sites() + 1;
    total = std::max(total, next);
    visit(first);
  }
  return total;
}

}  // namespace

std::uint64_t Layer::dropout_sites(const LayerSpec& spec) {
  return number_sites(spec, "spec", [](std::uint64_t) {});
}

void Layer::declare(ParamFactory& factory, const std::string& prefix,
                    const TransformerConfig& config, const LayerSpec& spec,
                    std::uint64_t first_dropout_site) {
  if (spec.blocks.empty()) throw Error("layer " + prefix + ": its spec has no blocks");
  hidden_dropout_ = config.hidden_dropout;
  tp_ = factory.tp;
  blocks_.clear();
  std::vector<std::uint64_t> firsts;
  number_sites(spec, prefix, [&](std::uint64_t first) { firsts.push_back(first); });
  for (std::size_t k = 0; k < spec.blocks.size(); ++k) {
    const BlockSpec& bs = spec.blocks[k];
    Block block;
    // The norm first, then the mixer: Megatron's module order, which the gradient buffers follow.
    block.has_norm = !bs.norm.name.empty();
    if (block.has_norm) {
      const std::string name = prefix + "." + bs.norm.name;
      block.norm = bs.norm.fused ? Norm::declare_fused(factory, name, config.hidden_size,
                                                       config.normalization, config.norm_epsilon)
                                 : Norm::declare(factory, name, config.hidden_size,
                                                 config.normalization, config.norm_epsilon);
    }
    if (bs.residual_from_norm && !block.has_norm) {
      throw Error("layer " + prefix + ": block '" + bs.name +
                  "' takes its residual from its norm but has no norm");
    }
    block.residual_from_norm = bs.residual_from_norm;
    block.mixer = make_mixer(bs, prefix);
    block.mixer->declare(factory, bs.name.empty() ? prefix : prefix + "." + bs.name, config);
    block.first_site = first_dropout_site + firsts[k];
    block.hidden_site = block.first_site + block.mixer->dropout_sites();
    blocks_.push_back(std::move(block));
  }
}

void Layer::end_training_iteration(Backend& backend, Communicator* data) {
  for (Block& block : blocks_)
    block.mixer->end_training_iteration(backend, data);
}

Mixer::Decoding Layer::decoding() const {
  Mixer::Decoding out = Mixer::Decoding::stateless;
  for (const Block& block : blocks_) {
    const Mixer::Decoding d = block.mixer->decoding();
    if (d == Mixer::Decoding::none) return d;
    if (d == Mixer::Decoding::cached) out = d;
  }
  return out;
}

Layer::Caches Layer::start_caches(Backend& backend, std::int64_t batch, std::int64_t max_tokens,
                                  DType dtype) const {
  Caches caches;
  for (const Block& block : blocks_) {
    caches.push_back(block.mixer->decoding() == Mixer::Decoding::cached
                         ? block.mixer->start_cache(backend, batch, max_tokens, dtype)
                         : nullptr);
  }
  return caches;
}

void Layer::forward_cached(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                           Caches& caches, std::int64_t past, Tensor& y) const {
  if (caches.size() != blocks_.size())
    throw Error("Layer::forward_cached: caches of another layer");
  decode_blocks(ctx, x, inputs, y, [&](std::size_t k, const Tensor& normed, Tensor& out) {
    blocks_[k].mixer->forward_cached(ctx, normed, inputs, *caches[k], past, out);
  });
}

void Layer::forward_ragged(const LayerContext& ctx, const Tensor& x, const LayerInputs& shared,
                           const std::vector<LayerInputs>& columns,
                           const std::vector<Caches*>& caches, std::span<const std::int64_t> past,
                           Tensor& y) const {
  const auto n = static_cast<std::size_t>(x.size(1));
  if (x.size(0) != 1 || columns.size() != n || caches.size() != n || past.size() != n) {
    throw Error(
        "Layer::forward_ragged: one new token of each sequence, with its inputs, caches "
        "and past");
  }
  for (const Caches* c : caches)
    if (!c || c->size() != blocks_.size())
      throw Error("Layer::forward_ragged: caches of another layer");
  Backend& be = ctx.backend;
  const std::int64_t h = x.size(2);
  decode_blocks(ctx, x, shared, y, [&](std::size_t k, const Tensor& normed, Tensor& out) {
    // Each sequence alone: its cache holds its own positions (x's rows are contiguous as S = 1).
    for (std::size_t b = 0; b < n; ++b) {
      const auto col = static_cast<std::int64_t>(b);
      Tensor one = be.empty({1, 1, h}, normed.dtype());
      be.copy(normed.slice(1, col, 1), one);
      Tensor one_out = be.empty({1, 1, h}, out.dtype());
      blocks_[k].mixer->forward_cached(ctx, one, columns[b], *(*caches[b])[k], past[b], one_out);
      Tensor out_col = out.slice(1, col, 1);
      be.copy(one_out, out_col);
    }
  });
}

void Layer::decode_blocks(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                          Tensor& y, const CachedStep& cached) const {
  Backend& be = ctx.backend;
  const std::int64_t h = x.size(2), rows = x.size(0) * x.size(1);
  Tensor in = x;
  for (std::size_t k = 0; k < blocks_.size(); ++k) {
    const Block& block = blocks_[k];
    Tensor normed = in;
    if (block.has_norm) {
      normed = be.empty(in.shape(), in.dtype());
      Tensor normed_rows = normed.view({rows, h});
      Norm::Saved unused;
      block.norm.forward(be, in.view({rows, h}), normed_rows, unused);
    }
    Tensor out = be.empty(in.shape(), in.dtype());
    switch (block.mixer->decoding()) {
      case Mixer::Decoding::stateless:
        (void)block.mixer->forward(ctx, normed, inputs, block.first_site, out);
        break;
      case Mixer::Decoding::cached:
        cached(k, normed, out);
        break;
      case Mixer::Decoding::none:
        throw Error("Layer: a block of this layer cannot decode incrementally");
    }
    Tensor sum = k + 1 == blocks_.size() ? y : be.empty(in.shape(), in.dtype());
    be.add(block.residual_from_norm ? normed : in, out, sum);
    in = sum;
  }
}

void Layer::forward_block(const LayerContext& ctx, const Block& block, const Tensor& x,
                          const LayerInputs& inputs, Tensor& y, Saved::Block& s) const {
  Backend& be = ctx.backend;
  const std::int64_t h = x.size(2), rows = x.size(0) * x.size(1);
  s.x = x;
  s.normed = x;
  if (block.has_norm) {
    s.normed = be.empty(x.shape(), x.dtype());
    Tensor normed_rows = s.normed.view({rows, h});
    block.norm.forward(be, x.view({rows, h}), normed_rows, s.norm);
  }
  Tensor out = be.empty(x.shape(), x.dtype());
  s.mixer = block.mixer->forward(ctx, s.normed, inputs, block.first_site, out);
  const float p = ctx.training ? hidden_dropout_ : 0.0f;
  if (p > 0) {
    be.dropout_forward(out, p, ctx.seed, hidden_offset(ctx, block.hidden_site, out.numel()), out);
  }
  be.add(block.residual_from_norm ? s.normed : x, out, y);
}

void Layer::forward(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs, Tensor& y,
                    Saved& saved, bool keep) const {
  Saved local;
  Saved& s = keep ? saved : local;
  s.blocks.clear();
  s.blocks.resize(blocks_.size());
  Tensor in = x;
  for (std::size_t k = 0; k < blocks_.size(); ++k) {
    // The last block's residual sum is the layer's output.
    Tensor out = k + 1 == blocks_.size() ? y : ctx.backend.empty(x.shape(), x.dtype());
    forward_block(ctx, blocks_[k], in, inputs, out, s.blocks[k]);
    in = out;
  }
  s.valid = keep;
}

void Layer::backward_block(const LayerContext& ctx, const Block& block, const Tensor& dy,
                           const LayerInputs& inputs, Saved::Block& s, Tensor& dx) const {
  Backend& be = ctx.backend;
  const std::int64_t h = dy.size(2), rows = dy.size(0) * dy.size(1);
  const float p = ctx.training ? hidden_dropout_ : 0.0f;
  // y = x + dropout(mixer(norm(x))), or norm(x) + dropout(mixer(norm(x)))
  Tensor dout = be.empty(dy.shape(), dy.dtype());
  if (p > 0) {
    be.dropout_backward(dy, p, ctx.seed, hidden_offset(ctx, block.hidden_site, dout.numel()), dout);
  } else {
    be.copy(dy, dout);
  }
  Tensor dnormed = be.empty(dy.shape(), dy.dtype());
  block.mixer->backward(ctx, s.normed, dout, inputs, block.first_site, *s.mixer, dnormed);
  if (block.has_norm) {
    if (block.residual_from_norm) be.add(dnormed, dy, dnormed);
    Tensor dx_rows = dx.view({rows, h});
    block.norm.backward(be, dnormed.view({rows, h}), s.x.view({rows, h}), s.norm, dx_rows);
    if (!block.residual_from_norm) be.add(dx, dy, dx);
  } else {
    be.add(dnormed, dy, dx);
  }
  s = {};
}

void Layer::backward(const LayerContext& ctx, const Tensor& dy, const LayerInputs& inputs,
                     Saved& saved, Tensor& dx) const {
  if (!saved.valid || saved.blocks.size() != blocks_.size()) {
    throw Error("Layer::backward without a saved forward");
  }
  // Refused before any block's backward has added gradients.
  for (const Block& block : blocks_) {
    for (const std::string& name : block.mixer->gradient_inputs()) {
      if (inputs.has(name)) (void)inputs.gradient(name, "layer backward");
    }
  }
  Tensor d = dy;
  for (std::size_t k = blocks_.size(); k-- > 0;) {
    Tensor dk = k == 0 ? dx : ctx.backend.empty(dy.shape(), dy.dtype());
    backward_block(ctx, blocks_[k], d, inputs, saved.blocks[k], dk);
    d = dk;
  }
  saved = {};
}

}  // namespace megatron::nn
