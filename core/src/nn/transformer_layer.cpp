// Pre-norm layer forward and backward with bias-dropout-add residuals: the transformer layer and
// the one-block kinds of hybrid stacks (attention, MLP, Mamba).
#include "megatron/nn/transformer_layer.h"

namespace megatron::nn {

std::uint64_t TransformerLayer::dropout_sites(const LayerSpec& spec) {
  switch (spec.kind) {
    case LayerKind::transformer:
      return spec.cross_attention ? 5 : 3;
    case LayerKind::attention:
      return 2;
    case LayerKind::mlp:
    case LayerKind::mamba:
      return 1;
  }
  return 0;
}

void TransformerLayer::declare(ParamFactory& factory, const std::string& prefix,
                               const TransformerConfig& config, const LayerSpec& spec,
                               std::uint64_t first_dropout_site) {
  config_ = config;
  tp_ = factory.tp;
  first_site_ = first_dropout_site;
  kind_ = spec.kind;
  cross_ = spec.cross_attention;
  if (cross_ && kind_ != LayerKind::transformer) {
    throw Error("layer " + prefix + ": cross-attention needs a transformer layer");
  }
  auto norm = [&](const std::string& local, const std::string& fused_linear) {
    return spec.fused_norm_names
               ? Norm::declare_fused(factory, prefix + "." + fused_linear, config.hidden_size,
                                     config.normalization, config.norm_epsilon)
               : Norm::declare(factory, prefix + "." + local, config.hidden_size,
                               config.normalization, config.norm_epsilon);
  };
  if (has_attention()) {
    input_layernorm = norm("input_layernorm", "self_attention.linear_qkv");
    self_attention.declare(factory, prefix + ".self_attention", config, spec.self_attention_mask);
  }
  if (kind_ == LayerKind::mamba) {
    input_layernorm = norm("norm", "mixer.in_proj");
    mixer.declare(factory, prefix + ".mixer", config);
  }
  if (cross_) {
    // In Megatron's module order, which the flat gradient buffers follow.
    pre_cross_attn_layernorm =
        Norm::declare(factory, prefix + ".pre_cross_attn_layernorm", config.hidden_size,
                      config.normalization, config.norm_epsilon);
    cross_attention.declare(factory, prefix + ".cross_attention", config);
  }
  if (has_mlp()) {
    pre_mlp_layernorm = norm("pre_mlp_layernorm", "mlp.linear_fc1");
    mlp.declare(factory, prefix + ".mlp", config);
  }
}

void TransformerLayer::forward(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                               Tensor& y, Saved& saved, bool keep) const {
  Backend& be = ctx.backend;
  const std::int64_t h = x.size(2), rows = x.size(0) * x.size(1);
  const DType dt = x.dtype();
  const float p = ctx.training ? config_.hidden_dropout : 0.0f;
  Saved local;
  Saved& s = keep ? saved : local;
  // A one-block layer's residual sum is its output.
  const bool more_blocks = cross_ || has_mlp();

  s.x1 = x;
  if (has_attention() || kind_ == LayerKind::mamba) {
    s.ln1 = be.empty(x.shape(), dt);
    Tensor ln1_rows = s.ln1.view({rows, h});
    input_layernorm.forward(be, x.view({rows, h}), ln1_rows, s.norm1);
    Tensor block = be.empty(x.shape(), dt);
    int hidden_site = 0;
    if (kind_ == LayerKind::mamba) {
      Tensor block_rows = block.view({rows, h});
      mixer.forward(ctx, ln1_rows, x.size(1), block_rows, s.mamba);
    } else {
      self_attention.forward(ctx, s.ln1, inputs, site(0), block, s.attention);
      hidden_site = 1;
    }
    if (p > 0) {
      be.dropout_forward(block, p, ctx.seed, hidden_offset(ctx, hidden_site, block.numel()), block);
    }
    s.x1 = more_blocks ? be.empty(x.shape(), dt) : y;
    be.add(x, block, s.x1);
  }

  s.x2 = s.x1;
  if (cross_) {
    s.ln_cross = be.empty(x.shape(), dt);
    Tensor ln_cross_rows = s.ln_cross.view({rows, h});
    pre_cross_attn_layernorm.forward(be, s.x1.view({rows, h}), ln_cross_rows, s.norm_cross);
    Tensor cross = be.empty(x.shape(), dt);
    cross_attention.forward(ctx, s.ln_cross, inputs.memory, inputs, site(3), cross, s.cross);
    if (p > 0) be.dropout_forward(cross, p, ctx.seed, hidden_offset(ctx, 4, cross.numel()), cross);
    s.x2 = be.empty(x.shape(), dt);
    be.add(s.x1, cross, s.x2);
  }

  if (has_mlp()) {
    s.ln2 = be.empty({rows, h}, dt);
    pre_mlp_layernorm.forward(be, s.x2.view({rows, h}), s.ln2, s.norm2);
    Tensor m = be.empty({rows, h}, dt);
    mlp.forward(ctx, s.ln2, m, s.mlp);
    if (p > 0) be.dropout_forward(m, p, ctx.seed, hidden_offset(ctx, mlp_site(), m.numel()), m);
    Tensor y_rows = y.view({rows, h});
    be.add(s.x2.view({rows, h}), m, y_rows);
  }

  if (keep) {
    saved.x = x;
    saved.valid = true;
  }
}

void TransformerLayer::backward(const LayerContext& ctx, const Tensor& dy,
                                const LayerInputs& inputs, Saved& saved, Tensor& dx) const {
  if (!saved.valid) throw Error("TransformerLayer::backward without a saved forward");
  if (cross_ && inputs.memory_grad == nullptr) {
    throw Error(
        "decoder layer backward: the micro-batch gave no memory gradient to accumulate "
        "into (LayerInputs::memory_grad)");
  }
  Backend& be = ctx.backend;
  const std::int64_t h = dy.size(2), rows = dy.size(0) * dy.size(1);
  const DType dt = dy.dtype();
  const float p = ctx.training ? config_.hidden_dropout : 0.0f;
  const Tensor dy_rows = dy.view({rows, h});

  // y = x2 + dropout(mlp(ln2(x2))), or y = x2
  Tensor dx2 = dy;
  if (has_mlp()) {
    Tensor dm = be.empty({rows, h}, dt);
    if (p > 0) {
      be.dropout_backward(dy_rows, p, ctx.seed, hidden_offset(ctx, mlp_site(), dm.numel()), dm);
    } else {
      be.copy(dy_rows, dm);
    }
    Tensor dln2 = be.empty({rows, h}, dt);
    mlp.backward(ctx, saved.ln2, dm, saved.mlp, dln2);
    saved.mlp = {};
    dx2 = be.empty(dy.shape(), dt);
    Tensor dx2_rows = dx2.view({rows, h});
    pre_mlp_layernorm.backward(be, dln2, saved.x2.view({rows, h}), saved.norm2, dx2_rows);
    be.add(dx2_rows, dy_rows, dx2_rows);
  }

  // x2 = x1 + dropout(cross_attention(ln_cross(x1), memory)), or x2 = x1
  Tensor dx1 = dx2;
  if (cross_) {
    Tensor dcross = be.empty(dy.shape(), dt);
    if (p > 0) {
      be.dropout_backward(dx2, p, ctx.seed, hidden_offset(ctx, 4, dcross.numel()), dcross);
    } else {
      be.copy(dx2, dcross);
    }
    Tensor dln_cross = be.empty(dy.shape(), dt);
    cross_attention.backward(ctx, saved.ln_cross, inputs.memory, dcross, inputs, site(3),
                             saved.cross, dln_cross, *inputs.memory_grad);
    dx1 = be.empty(dy.shape(), dt);
    Tensor dx1_from_cross = dx1.view({rows, h});
    pre_cross_attn_layernorm.backward(be, dln_cross.view({rows, h}), saved.x1.view({rows, h}),
                                      saved.norm_cross, dx1_from_cross);
    be.add(dx1, dx2, dx1);
  }
  const Tensor dx1_rows = dx1.view({rows, h});
  Tensor dx_rows = dx.view({rows, h});

  // x1 = x + dropout(block(ln1(x))), block = attention or the Mamba mixer; or x1 = x
  if (!has_attention() && kind_ != LayerKind::mamba) {
    be.copy(dx1_rows, dx_rows);
    saved = {};
    return;
  }
  const int hidden_site = kind_ == LayerKind::mamba ? 0 : 1;
  Tensor dblock = be.empty(dy.shape(), dt);
  if (p > 0) {
    be.dropout_backward(dx1, p, ctx.seed, hidden_offset(ctx, hidden_site, dblock.numel()), dblock);
  } else {
    be.copy(dx1, dblock);
  }
  Tensor dln1 = be.empty(dy.shape(), dt);
  if (kind_ == LayerKind::mamba) {
    Tensor dln1_rows = dln1.view({rows, h});
    mixer.backward(ctx, dblock.view({rows, h}), saved.mamba, dln1_rows);
  } else {
    self_attention.backward(ctx, saved.ln1, dblock, inputs, site(0), saved.attention, dln1);
  }
  input_layernorm.backward(be, dln1.view({rows, h}), saved.x.view({rows, h}), saved.norm1, dx_rows);
  be.add(dx_rows, dx1_rows, dx_rows);
  saved = {};
}

}  // namespace megatron::nn
