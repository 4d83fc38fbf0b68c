// GPT: the core's language model with causal transformer layers, and its description.
#include "gpt_model.h"

#include <algorithm>
#include <sstream>

namespace megatron::gpt {

GptModel::GptModel(GptConfig config) : LanguageModel(std::move(config), "GPT", "final_layernorm") {}

std::string GptModel::describe() const {
  const nn::TransformerConfig& tc = config_.transformer;
  std::ostringstream out;
  out << "GPT: " << tc.num_layers << " layers, hidden " << tc.hidden_size << ", "
      << tc.num_attention_heads << " heads (" << tc.num_query_groups << " query groups, kv "
      << tc.kv_channels << "), ffn " << tc.ffn_hidden_size << (tc.swiglu ? " swiglu" : " gelu")
      << ", vocab " << info().vocab_size << " padded to " << padded_vocab_ << ", seq "
      << info().seq_length;
  const nn::MoeConfig& moe = tc.moe;
  if (moe.num_experts > 0) {
    const auto moe_layers = std::count(moe.layer_pattern.begin(), moe.layer_pattern.end(), 1);
    out << ", " << moe_layers << " MoE layers of " << moe.num_experts << " experts (top-"
        << moe.routing.topk << ", expert ffn " << moe.ffn_hidden_size;
    if (moe.shared_expert_ffn > 0) out << ", shared experts ffn " << moe.shared_expert_ffn;
    out << ")";
  }
  return describe_layout(out.str());
}

std::string GptModel::context_parallel_refusal() const {
  return "";  // every GPT layer, dense or MoE, splits its sequences
}

}  // namespace megatron::gpt
