// An out-of-tree model plugin, written as a third party would: a small LLaMA-style decoder
// ("llama_tiny") on megatron-app's layer stack, built against the installed SDK only.
//
// LLaMA in the core's slots: RMSNorm, SwiGLU MLP, rotary positions (no position table),
// grouped-query attention, no linear biases, no dropout, an untied output layer. Its [model]
// table is the shared transformer schema (nn::declare_model_config) with LLaMA's defaults.
// It reads the GPT dataset's fields, so it trains on any [data] type = "gpt".
//
// With `parallel_attention_mlp = true` every layer is one block of a kind this plugin adds to the
// SDK's open layer vocabulary: GPT-J's parallel layer, x + Attn(LN(x)) + MLP(LN(x)), built from
// the core's SelfAttention and Mlp behind one norm.
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "megatron/config/schema.h"
#include "megatron/error.h"
#include "megatron/nn/core_blocks.h"
#include "megatron/nn/embedding.h"
#include "megatron/nn/layer_stack_model.h"
#include "megatron/nn/lm_loss.h"
#include "megatron/nn/model_config.h"
#include "megatron/plugin.h"

namespace acme::llama_tiny {

namespace mt = megatron;
namespace nn = megatron::nn;
using megatron::config::TableSchema;

// ---- [model] schema ---------------------------------------------------------------------------

// The shared keys (names, ranges, consistency rules) with LLaMA's defaults in place of GPT's.
void declare_config(TableSchema& schema) {
  nn::declare_model_config(schema);
  schema.set_default("normalization", std::string("RMSNorm"))
      .set_default("swiglu", true)
      .set_default("disable_bias_linear", true)
      .set_default("untie_embeddings_and_output_weights", true)
      .set_default("num_query_groups", std::int64_t{2})  // grouped-query attention: 2 kv groups
      .set_default("hidden_dropout", 0.0)
      .set_default("attention_dropout", 0.0)
      .set_default("position_embedding_type", std::string("rope"))
      .set_choices("position_embedding_type", {"rope"},  // no learned position table
                   "position encoding (rotary only)");
  schema.boolean("parallel_attention_mlp", false,
                 "GPT-J's parallel layer: attention and MLP side by side behind one norm");
}

// ---- a block kind of this plugin's own ----------------------------------------------------------

// GPT-J's parallel attention + MLP: both read the same normed input and their outputs are summed
// before the block's dropout and residual. Parameters `<layer>.self_attention.*`, `<layer>.mlp.*`.
class ParallelAttentionMlp final : public nn::Mixer {
 public:
  struct State : Saved {
    nn::SelfAttention::Saved attention;
    nn::Mlp::Saved mlp;
  };
  std::uint64_t dropout_sites() const override { return 1; }  // the attention probabilities
  std::vector<std::string> gradient_inputs() const override {
    return {nn::layer_input::attention_bias};
  }
  void declare(nn::ParamFactory& factory, const std::string& prefix,
               const nn::TransformerConfig& config) override {
    attention_.declare(factory, prefix + ".self_attention", config, nn::AttentionMask::causal);
    mlp_.declare(factory, prefix + ".mlp", config);
  }
  std::unique_ptr<Saved> forward(const nn::LayerContext& ctx, const mt::Tensor& x,
                                 const nn::LayerInputs& inputs, std::uint64_t first_site,
                                 mt::Tensor& y) const override {
    auto state = std::make_unique<State>();
    attention_.forward(ctx, x, inputs, first_site, y, state->attention);
    mt::Tensor m = ctx.backend.empty(x.shape(), x.dtype());
    mt::Tensor m_rows = nn::rows_of(m);
    mlp_.forward(ctx, nn::rows_of(x), m_rows, state->mlp);
    ctx.backend.add(y, m, y);
    return state;
  }
  void backward(const nn::LayerContext& ctx, const mt::Tensor& x, const mt::Tensor& dy,
                const nn::LayerInputs& inputs, std::uint64_t first_site, Saved& saved,
                mt::Tensor& dx) const override {
    State& state = static_cast<State&>(saved);
    attention_.backward(ctx, x, dy, inputs, first_site, state.attention, dx);
    mt::Tensor dx_mlp = ctx.backend.empty(x.shape(), x.dtype());
    mt::Tensor dx_mlp_rows = nn::rows_of(dx_mlp);
    mlp_.backward(ctx, nn::rows_of(x), nn::rows_of(dy), state.mlp, dx_mlp_rows);
    ctx.backend.add(dx, dx_mlp, dx);
  }

 private:
  nn::SelfAttention attention_;
  nn::Mlp mlp_;
};

// ---- the model --------------------------------------------------------------------------------

namespace {

struct EmbeddingState : nn::LayerStackModel::ProcessState {
  mt::Tensor ids;  // (S, B)
};
struct HeadState : nn::LayerStackModel::ProcessState {
  mt::Tensor dnormed;  // the loss gradient at the final norm's output
};

}  // namespace

class LlamaTiny final : public nn::LayerStackModel {
 public:
  LlamaTiny(nn::ModelConfig config, bool parallel_layers)
      : LayerStackModel(std::move(config), "llama_tiny", "decoder"),
        parallel_layers_(parallel_layers) {}

  // The GPT dataset's fields.
  mt::SampleSpec input_fields() const override {
    return {{"tokens", mt::DType::i32, {}, mt::FieldKind::token_ids},
            {"labels", mt::DType::i32, {}, mt::FieldKind::labels},
            {"loss_mask", mt::DType::f32, {}, mt::FieldKind::mask}};
  }

  std::string describe() const override {
    const nn::TransformerConfig& tc = config_.transformer;
    std::ostringstream out;
    out << "llama_tiny: " << tc.num_layers << " layers, hidden " << tc.hidden_size << ", "
        << tc.num_attention_heads << " heads (" << tc.num_query_groups << " query groups, kv "
        << tc.kv_channels << "), ffn " << tc.ffn_hidden_size << (tc.swiglu ? " swiglu" : " gelu")
        << ", " << (tc.normalization == nn::NormKind::rmsnorm ? "RMSNorm" : "LayerNorm")
        << ", rope dim " << tc.rotary_dim << ", vocab " << info().vocab_size << " padded to "
        << padded_vocab_ << ", seq " << info().seq_length
        << (parallel_layers_ ? ", parallel attention + MLP layers" : "");
    return describe_layout(out.str());
  }

 protected:
  nn::LayerSpec layer_spec(std::int64_t) const override {
    if (!parallel_layers_) return nn::transformer_layer_spec(nn::AttentionMask::causal);
    // Empty block name: the kind names its submodules under the layer itself.
    return {{nn::BlockSpec{"",
                           {"input_layernorm", false},
                           [] { return std::make_unique<ParallelAttentionMlp>(); },
                           {}}}};
  }

  // Positions need nothing here: the base builds the rotary tables from the config (rotary_dim)
  // and hands them to every layer.
  std::uint64_t declare_pre_process(nn::ParamFactory& factory) override {
    const nn::TransformerConfig& tc = config_.transformer;
    // max_positions 0: word embeddings only, positions come from the rotary tables.
    embedding_.declare(factory, "embedding", padded_vocab_, tc.hidden_size, 0, tc.init_method_std,
                       tc.hidden_dropout);
    share_word_embeddings(*embedding_.word_embeddings, config_.untie_embeddings_and_output_weights);
    return 1;  // the embedding dropout site
  }

  void declare_post_process(nn::ParamFactory& factory, bool with_pre_process) override {
    output_layer_ = declare_output_weight(factory, with_pre_process,
                                          config_.untie_embeddings_and_output_weights);
  }

  mt::Tensor pre_forward(const nn::LayerContext& ctx, const mt::Batch& batch, nn::LayerInputs&,
                         std::unique_ptr<ProcessState>& state) override {
    const mt::Tensor& tokens = batch["tokens"];
    if (tokens.size(1) != info().seq_length) {
      throw mt::Error("llama_tiny: batch of sequence length " + std::to_string(tokens.size(1)) +
                      ", model built for " + std::to_string(info().seq_length));
    }
    auto st = std::make_unique<EmbeddingState>();
    st->ids = nn::sequence_major(ctx.backend, tokens);
    mt::Tensor x = ctx.backend.empty(
        {local_seq(tokens.size(1)), tokens.size(0), config_.transformer.hidden_size},
        info().param_dtype);
    embedding_.forward(ctx, st->ids, 0, x);
    state = std::move(st);
    return x;
  }

  void pre_backward(const nn::LayerContext& ctx, ProcessState* state,
                    const mt::Tensor& dx) override {
    embedding_.backward(ctx, static_cast<EmbeddingState*>(state)->ids, 0, dx);
  }

  mt::StepResult post_forward(const nn::LayerContext& ctx, const mt::Batch& batch,
                              const mt::Tensor& normed, const mt::StepOptions& options,
                              std::unique_ptr<ProcessState>& state) override {
    mt::Backend& be = ctx.backend;
    const std::int64_t rows = batch["labels"].numel();
    const mt::Tensor labels = nn::sequence_major(be, batch["labels"]).view({rows});
    const mt::Tensor mask = batch["loss_mask"].transpose(0, 1).contiguous().view({rows});
    auto st = std::make_unique<HeadState>();
    if (options.backward) st->dnormed = be.empty(normed.shape(), info().param_dtype);
    const nn::LmLossResult loss =
        nn::lm_loss(be, normed, output_weight(), labels, mask, options.loss_scale,
                    options.backward ? &st->dnormed : nullptr, info().compute_dtype, tp());
    state = std::move(st);
    return {{{"lm loss", loss.loss_sum, loss.token_count}}, {}};
  }

  mt::Tensor post_backward(const nn::LayerContext&, ProcessState* state) override {
    return static_cast<HeadState*>(state)->dnormed;
  }

 private:
  mt::Parameter& output_weight() {
    return output_layer_ ? *output_layer_ : *embedding_.word_embeddings;
  }

  bool parallel_layers_ = false;
  nn::Embedding embedding_;                // first virtual stage
  mt::Parameter* output_layer_ = nullptr;  // output_layer.weight (or a tied copy)
};

// ---- the plugin -------------------------------------------------------------------------------

std::unique_ptr<mt::Plugin> create(mt::PluginContext& ctx) {
  return std::make_unique<LlamaTiny>(nn::parse_model_config(ctx.config),
                                     ctx.config.boolean("parallel_attention_mlp"));
}

const mt::PluginDescriptor* describe() {
  static const mt::PluginDescriptor descriptor = mt::make_plugin_descriptor(
      mt::PluginKind::model, "llama_tiny", "0.1.0",
      "LLaMA-style decoder: RMSNorm, SwiGLU, RoPE, GQA, no biases (out-of-tree example)",
      declare_config, create);
  return &descriptor;
}

}  // namespace acme::llama_tiny

MEGATRON_PLUGIN(acme::llama_tiny::describe)
