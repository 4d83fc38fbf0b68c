// MambaModel: the hybrid stack's layer kinds, its description, dimensions and FLOPs.
#include "mamba_model.h"

#include <algorithm>
#include <sstream>

#include "megatron/nn/moe/moe_block.h"

namespace megatron::mamba {

MambaModel::MambaModel(MambaConfig config)
    : LanguageModel(std::move(config.model), "Mamba", "final_norm"),
      layers_(std::move(config.layers)) {}

nn::LayerSpec MambaModel::layer_spec(std::int64_t layer) const {
  // Megatron-core's hybrid stack: one-block layers, their norms named as TE's fused ones.
  switch (layers_.kinds.at(static_cast<std::size_t>(layer))) {
    case 'M':
      return {{nn::mamba_block(nn::NormNames::fused)}};
    case '*':
      return {{nn::self_attention_block(nn::AttentionMask::causal, nn::NormNames::fused)}};
    case 'E':  // Megatron's MoE layer: pre_mlp_layernorm (TENorm) -> MoE
      return {{nn::moe_block()}};
    default:
      return {{nn::mlp_block(nn::NormNames::fused)}};
  }
}

std::string MambaModel::describe() const {
  const nn::TransformerConfig& tc = config_.transformer;
  const auto count = [&](char c) {
    return std::count(layers_.kinds.begin(), layers_.kinds.end(), c);
  };
  std::ostringstream s;
  s << "Mamba: " << tc.num_layers << " layers (" << count('M') << " Mamba, " << count('*')
    << " attention, " << count('-') << " MLP, " << count('E') << " MoE: " << layers_.kinds
    << "), hidden " << tc.hidden_size << ", Mamba heads " << tc.mamba_heads() << " x "
    << tc.mamba_head_dim << ", state " << tc.mamba_state_dim << ", groups " << tc.mamba_num_groups;
  if (count('*') > 0) {
    s << ", attention " << tc.num_attention_heads << " heads (" << tc.num_query_groups
      << " query groups)";
  }
  if (count('-') > 0) s << ", ffn " << tc.ffn_hidden_size;
  if (count('E') > 0) {
    s << ", " << tc.moe.num_experts << " experts (top-" << tc.moe.routing.topk << ", expert ffn "
      << tc.moe.ffn_hidden_size << ")";
  }
  s << ", vocab " << info().vocab_size << " padded to " << padded_vocab_ << ", seq "
    << info().seq_length;
  return describe_layout(s.str());
}

ModelDimensions MambaModel::dimensions() const {
  ModelDimensions d = LayerStackModel::dimensions();
  d.stage_layer_counts = layers_.stage_layers;
  return d;
}

double MambaModel::flops_per_iteration(std::int64_t samples) const {
  const nn::TransformerConfig& tc = config_.transformer;
  const double b = static_cast<double>(samples), s = static_cast<double>(info().seq_length);
  const double h = static_cast<double>(tc.hidden_size);
  const auto count = [&](char c) {
    return static_cast<double>(std::count(layers_.kinds.begin(), layers_.kinds.end(), c));
  };
  // attn_layer_flops with kv_channels: p = kv_channels * heads / h, g = query groups.
  const double heads = static_cast<double>(tc.num_attention_heads);
  const double p = static_cast<double>(tc.kv_channels) * heads / h;
  const double g = static_cast<double>(tc.num_query_groups);
  const double attention = 4 * b * s * h * p * (h + h * (g / heads) + s / 2);
  const double expansion = static_cast<double>(tc.ffn_hidden_size) / h;
  const double mlp = 4 * expansion * (tc.swiglu ? 1.5 : 1.0) * b * s * h * h;
  // mamba_layer_flops: in_proj, the scan (7 b s d_in N), out_proj; d_in = 2h as Megatron writes
  // it, with the heads given or derived.
  const double d_in = 2 * h, n = static_cast<double>(tc.mamba_state_dim);
  const double mamba_heads = static_cast<double>(tc.mamba_heads());
  const double groups = static_cast<double>(tc.mamba_num_groups);
  const double mamba = 2 * b * s * h * (2 * d_in + 2 * groups * n + mamba_heads) +
                       7 * b * s * d_in * n + 2 * b * s * d_in * h;
  // moe_layer_flops: the routed experts' MLPs and the shared experts'.
  const double glu = tc.swiglu ? 1.5 : 1.0;
  const double moe =
      4 * b * s * h * glu *
      static_cast<double>(tc.moe.ffn_hidden_size * tc.moe.routing.topk + tc.moe.shared_expert_ffn);
  const double logits = 2 * b * s * h * static_cast<double>(padded_vocab_size());
  return 3 * (count('*') * attention + count('-') * mlp + count('M') * mamba + count('E') * moe +
              logits);
}

}  // namespace megatron::mamba
