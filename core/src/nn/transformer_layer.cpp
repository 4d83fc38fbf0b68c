// Pre-norm transformer layer forward and backward with bias-dropout-add residuals.
#include "megatron/nn/transformer_layer.h"

namespace megatron::nn {

void TransformerLayer::declare(ParamFactory& factory, const std::string& prefix,
                               const TransformerConfig& config, const LayerSpec& spec,
                               std::uint64_t first_dropout_site) {
  config_ = config;
  tp_ = factory.tp;
  first_site_ = first_dropout_site;
  input_layernorm = Norm::declare(factory, prefix + ".input_layernorm", config.hidden_size,
                                  config.normalization, config.norm_epsilon);
  self_attention.declare(factory, prefix + ".self_attention", config, spec.self_attention_mask);
  pre_mlp_layernorm = Norm::declare(factory, prefix + ".pre_mlp_layernorm", config.hidden_size,
                                    config.normalization, config.norm_epsilon);
  mlp.declare(factory, prefix + ".mlp", config);
}

void TransformerLayer::forward(const LayerContext& ctx, const Tensor& x, const LayerInputs& inputs,
                               Tensor& y, Saved& saved, bool keep) const {
  Backend& be = ctx.backend;
  const std::int64_t h = x.size(2), rows = x.size(0) * x.size(1);
  const DType dt = x.dtype();
  const float p = ctx.training ? config_.hidden_dropout : 0.0f;
  Saved local;
  Saved& s = keep ? saved : local;

  s.ln1 = be.empty(x.shape(), dt);
  Tensor ln1_rows = s.ln1.view({rows, h});
  input_layernorm.forward(be, x.view({rows, h}), ln1_rows, s.norm1);
  Tensor attn = be.empty(x.shape(), dt);
  self_attention.forward(ctx, s.ln1, inputs, site(0), attn, s.attention);
  if (p > 0) be.dropout_forward(attn, p, ctx.seed, hidden_offset(ctx, 1, attn.numel()), attn);
  s.x1 = be.empty(x.shape(), dt);
  be.add(x, attn, s.x1);

  s.ln2 = be.empty({rows, h}, dt);
  pre_mlp_layernorm.forward(be, s.x1.view({rows, h}), s.ln2, s.norm2);
  Tensor m = be.empty({rows, h}, dt);
  mlp.forward(ctx, s.ln2, m, s.mlp);
  if (p > 0) be.dropout_forward(m, p, ctx.seed, hidden_offset(ctx, 2, m.numel()), m);
  Tensor y_rows = y.view({rows, h});
  be.add(s.x1.view({rows, h}), m, y_rows);

  if (keep) {
    saved.x = x;
    saved.valid = true;
  }
}

void TransformerLayer::backward(const LayerContext& ctx, const Tensor& dy,
                                const LayerInputs& inputs, Saved& saved, Tensor& dx) const {
  if (!saved.valid) throw Error("TransformerLayer::backward without a saved forward");
  Backend& be = ctx.backend;
  const std::int64_t h = dy.size(2), rows = dy.size(0) * dy.size(1);
  const DType dt = dy.dtype();
  const float p = ctx.training ? config_.hidden_dropout : 0.0f;
  const Tensor dy_rows = dy.view({rows, h});

  // y = x1 + dropout(mlp(ln2(x1)))
  Tensor dm = be.empty({rows, h}, dt);
  if (p > 0) {
    be.dropout_backward(dy_rows, p, ctx.seed, hidden_offset(ctx, 2, dm.numel()), dm);
  } else {
    be.copy(dy_rows, dm);
  }
  Tensor dln2 = be.empty({rows, h}, dt);
  mlp.backward(ctx, saved.ln2, dm, saved.mlp, dln2);
  saved.mlp = {};
  Tensor dx1 = be.empty(dy.shape(), dt);
  Tensor dx1_rows = dx1.view({rows, h});
  pre_mlp_layernorm.backward(be, dln2, saved.x1.view({rows, h}), saved.norm2, dx1_rows);
  be.add(dx1_rows, dy_rows, dx1_rows);

  // x1 = x + dropout(attention(ln1(x)))
  Tensor dattn = be.empty(dy.shape(), dt);
  if (p > 0) {
    be.dropout_backward(dx1, p, ctx.seed, hidden_offset(ctx, 1, dattn.numel()), dattn);
  } else {
    be.copy(dx1, dattn);
  }
  Tensor dln1 = be.empty(dy.shape(), dt);
  self_attention.backward(ctx, saved.ln1, dattn, inputs, site(0), saved.attention, dln1);
  Tensor dx_rows = dx.view({rows, h});
  input_layernorm.backward(be, dln1.view({rows, h}), saved.x.view({rows, h}), saved.norm1, dx_rows);
  be.add(dx_rows, dx1_rows, dx_rows);
  saved = {};
}

}  // namespace megatron::nn
