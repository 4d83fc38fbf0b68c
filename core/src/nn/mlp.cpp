// MLP forward and backward.
#include "megatron/nn/mlp.h"

#include <string>

#include "megatron/error.h"

namespace megatron::nn {

void Mlp::declare(ParamFactory& factory, const std::string& prefix,
                  const TransformerConfig& config) {
  config_ = config;
  tp_ = factory.tp;
  if (config.ffn_hidden_size % tp_.size != 0) {
    throw ConfigError("ffn_hidden_size (" + std::to_string(config.ffn_hidden_size) +
                      ") must be divisible by tensor_model_parallel_size (" +
                      std::to_string(tp_.size) + ")");
  }
  ffn_ = config.ffn_hidden_size / tp_.size;
  const std::int64_t fc1_out = config.swiglu ? 2 * config.ffn_hidden_size : config.ffn_hidden_size;
  fc1 = Linear::declare(factory, prefix + ".linear_fc1", config.hidden_size, fc1_out,
                        config.add_bias_linear, config.init_method_std, TensorParallel::column,
                        config.swiglu ? 2 : 1);
  fc2 = Linear::declare(factory, prefix + ".linear_fc2", config.ffn_hidden_size, config.hidden_size,
                        config.add_bias_linear, config.output_init_std(), TensorParallel::row);
}

void Mlp::forward(const LayerContext& ctx, const Tensor& x, Tensor& y, Saved& saved) const {
  Backend& be = ctx.backend;
  const std::int64_t rows = tp_full_rows(tp_, x.size(0)), f = ffn_;
  saved.fc1_out = be.empty({rows, config_.swiglu ? 2 * f : f}, x.dtype());
  fc1.forward(be, x, saved.fc1_out, ctx.compute);
  saved.act_out = be.empty({rows, f}, x.dtype());
  if (config_.swiglu) {
    be.swiglu_forward(saved.fc1_out, saved.act_out);
  } else {
    be.gelu_forward(saved.fc1_out, saved.act_out, config_.gelu);
  }
  fc2.forward(be, saved.act_out, y, ctx.compute);
}

void Mlp::backward(const LayerContext& ctx, const Tensor& x, const Tensor& dy, const Saved& saved,
                   Tensor& dx) const {
  Backend& be = ctx.backend;
  Tensor dact = be.empty(saved.act_out.shape(), x.dtype());
  fc2.backward(be, saved.act_out, dy, &dact, ctx.compute);
  Tensor dfc1 = be.empty(saved.fc1_out.shape(), x.dtype());
  if (config_.swiglu) {
    be.swiglu_backward(dact, saved.fc1_out, dfc1);
  } else {
    be.gelu_backward(dact, saved.fc1_out, dfc1, config_.gelu);
  }
  fc1.backward(be, x, dfc1, &dx, ctx.compute);
}

}  // namespace megatron::nn
