// T5Model on the core's MultiStackModel: the shared embedding and relative position tables
// (declared in Megatron's order), each stack's masks and biases, and the LM head.
#include "t5_model.h"

#include <algorithm>
#include <sstream>

#include "megatron/error.h"
#include "megatron/nn/layer_stack_model.h"
#include "megatron/nn/lm_head.h"

namespace megatron::t5 {

namespace {

constexpr std::size_t encoder = 0, decoder = 1;

// What one stack's inputs keep for backward: the embedded ids (its first stage), the relative
// position bias's gradient, summed over the layers.
struct StackState : nn::MultiStackModel::ProcessState {
  Tensor ids, bias_grad;
};
struct HeadState : nn::MultiStackModel::ProcessState {
  Tensor dnormed;
};

}  // namespace

T5Model::T5Model(T5Config config)
    : nn::MultiStackModel(config.model, "T5"), t5_(std::move(config)) {}

SampleSpec T5Model::input_fields() const {
  return {{"text_enc", DType::i32, {}, FieldKind::token_ids},
          {"text_dec", DType::i32, {}, FieldKind::token_ids},
          {"labels", DType::i32, {}, FieldKind::labels},
          {"loss_mask", DType::f32, {}, FieldKind::mask},
          {"enc_mask", DType::i32, {}, FieldKind::mask},
          {"dec_mask", DType::i32, {}, FieldKind::mask}};
}

std::vector<T5Model::StackSpec> T5Model::prepare(const ModelBuildInfo& info) {
  enc_seq_ = info.seq_length;
  const FieldSpec* dec = find_field(info.sample_fields, "text_dec");
  if (!dec || dec->shape.size() != 1) {
    throw ConfigError(
        "T5: the dataset gives no decoder tokens (a text_dec field of one dimension); use [data] "
        "type = \"t5\"");
  }
  dec_seq_ = dec->shape[0];
  const nn::LayerSpec encoder_spec = nn::transformer_layer_spec(nn::AttentionMask::padding);
  const nn::LayerSpec decoder_spec = nn::decoder_layer_spec(nn::AttentionMask::causal_padding);
  return {
      {"encoder", t5_.encoder_num_layers, enc_seq_, [=](std::int64_t) { return encoder_spec; }},
      {"decoder", t5_.decoder_num_layers, dec_seq_, [=](std::int64_t) { return decoder_spec; }}};
}

void T5Model::share(Parameter* p, std::vector<int> holders) const {
  if (!p || info().pipeline.size <= 1) return;
  std::sort(holders.begin(), holders.end());
  holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
  p->pipeline_holders = std::move(holders);
}

std::uint64_t T5Model::declare_pre_process(nn::ParamFactory& factory,
                                           const std::vector<StackRole>& roles) {
  const nn::TransformerConfig& tc = config_.transformer;
  const bool learned = config_.position_embedding == nn::PositionEmbedding::learned_absolute;
  const bool relative = config_.position_embedding == nn::PositionEmbedding::relative;
  const int split = stages_of(decoder).front(), last = info().pipeline.size - 1;
  embedding_ = nn::Embedding();
  word_copy_ = output_layer_weight_ = output_bias_ = nullptr;
  biases_[encoder] = biases_[decoder] = nn::RelativePositionBias();
  // Megatron-core's T5Model order: the embedding, then the relative position tables.
  if (roles[encoder].pre_process || roles[decoder].pre_process) {
    embedding_.declare(factory, "embedding", padded_vocab_, tc.hidden_size,
                       learned ? config_.max_position_embeddings : 0, tc.init_method_std,
                       tc.hidden_dropout);
    std::vector<int> word_holders = {0, split};
    if (!config_.untie_embeddings_and_output_weights) word_holders.push_back(last);
    share(embedding_.word_embeddings, word_holders);
    share(embedding_.position_embeddings, {0, split});
  }
  const char* names[] = {"encoder_relative_pos_emb", "decoder_relative_pos_emb"};
  for (const std::size_t k : {encoder, decoder}) {
    if (!relative || roles[k].layers.count == 0) continue;
    biases_[k].declare(factory, names[k], tc.num_attention_heads, k == encoder,
                       t5_.relative_attention_num_buckets, t5_.relative_attention_max_distance,
                       tc.init_method_std);
    share(biases_[k].table, stages_of(k));
  }
  return 2;  // one embedding dropout site per stack
}

void T5Model::declare_post_process(nn::ParamFactory& factory, const std::vector<StackRole>& roles) {
  const nn::TransformerConfig& tc = config_.transformer;
  // Megatron's T5LMHead: a column-parallel output layer whose weight is the word embedding and
  // which has a bias when tied; untied, its own weight and no bias.
  if (config_.untie_embeddings_and_output_weights) {
    output_layer_weight_ =
        &factory.declare("lm_head.output_layer.weight", {padded_vocab_, tc.hidden_size},
                         ParamInit::normal, tc.init_method_std, true, nn::Split{0, 1});
    return;
  }
  if (!roles[encoder].pre_process && !roles[decoder].pre_process) {
    // The last stage's own copy of the shared word embedding (same name and initialisation).
    word_copy_ =
        &factory.declare("embedding.word_embeddings.weight", {padded_vocab_, tc.hidden_size},
                         ParamInit::normal, tc.init_method_std, true, nn::Split{0, 1});
    share(word_copy_, {0, stages_of(decoder).front(), info().pipeline.size - 1});
  }
  output_bias_ = &factory.declare("lm_head.output_layer.bias", {padded_vocab_}, ParamInit::zeros, 0,
                                  false, nn::Split{0, 1});
}

void T5Model::stack_inputs(const nn::LayerContext& ctx, std::size_t stack, const Batch& batch,
                           const StepOptions& options, nn::LayerInputs& in,
                           std::unique_ptr<ProcessState>& state) {
  Backend& be = ctx.backend;
  auto st = std::make_unique<StackState>();
  in.set(nn::layer_input::key_padding_mask,
         nn::key_padding_from_mask(be, batch[stack == encoder ? "enc_mask" : "dec_mask"]));
  if (config_.position_embedding == nn::PositionEmbedding::relative) {
    const std::int64_t s = stack == encoder ? enc_seq_ : dec_seq_;
    const Tensor bias = biases_[stack].forward(ctx, s, s);
    in.set(nn::layer_input::attention_bias, bias);
    if (options.backward) {
      st->bias_grad = be.empty(bias.shape(), bias.dtype());
      be.fill(st->bias_grad, 0.0);
      in.collect_gradient(nn::layer_input::attention_bias, st->bias_grad);
    }
  }
  if (stack == decoder) {
    in.set(nn::layer_input::memory_padding_mask, nn::key_padding_from_mask(be, batch["enc_mask"]));
  }
  state = std::move(st);
}

void T5Model::inputs_backward(const nn::LayerContext& ctx, std::size_t stack, ProcessState* state) {
  const auto& st = static_cast<const StackState&>(*state);
  if (st.bias_grad.defined()) biases_[stack].backward(ctx, st.bias_grad);
}

Tensor T5Model::pre_forward(const nn::LayerContext& ctx, std::size_t stack, const Batch& batch,
                            ProcessState* state) {
  Backend& be = ctx.backend;
  const char* field = stack == encoder ? "text_enc" : "text_dec";
  const Tensor& tokens = batch[field];
  const std::int64_t s = stack == encoder ? enc_seq_ : dec_seq_;
  if (tokens.dim() != 2 || tokens.size(1) != s) {
    throw Error(std::string("T5: ") + field + " is " + tokens.describe() +
                ", the model was built for sequences of " + std::to_string(s));
  }
  auto& st = static_cast<StackState&>(*state);
  st.ids = nn::sequence_major(be, tokens);
  Tensor x =
      be.empty({local_seq(s), tokens.size(0), config_.transformer.hidden_size}, info().param_dtype);
  embedding_.forward(ctx, st.ids, stack, x);  // dropout site: the stack's number
  return x;
}

void T5Model::pre_backward(const nn::LayerContext& ctx, std::size_t stack, ProcessState* state,
                           const Tensor& dx) {
  embedding_.backward(ctx, static_cast<StackState&>(*state).ids, stack, dx);
}

StepResult T5Model::post_forward(const nn::LayerContext& ctx, const Batch& batch,
                                 const Tensor& normed, const StepOptions& options,
                                 std::unique_ptr<ProcessState>& state) {
  auto st = std::make_unique<HeadState>();
  if (options.backward) st->dnormed = ctx.backend.empty(normed.shape(), normed.dtype());
  Parameter& weight = output_layer_weight_ ? *output_layer_weight_
                      : word_copy_         ? *word_copy_
                                           : *embedding_.word_embeddings;
  const nn::LmLossResult loss =
      nn::batch_lm_loss(ctx, batch, normed, weight, output_bias_, options, tp(), &st->dnormed);
  state = std::move(st);
  // pretrain_t5 uses pretrain_gpt's loss_func: the loss-masked sum over the masked count.
  StepResult result;
  result.losses = {{"lm loss", loss.loss_sum, loss.token_count}};
  return result;
}

Tensor T5Model::post_backward(const nn::LayerContext&, ProcessState* state) {
  return static_cast<HeadState&>(*state).dnormed;
}

double T5Model::flops_per_iteration(std::int64_t samples) const {
  // Megatron's convention (num_floating_point_operations): 2 FLOPs per multiply-add, backward
  // twice the forward, causal self-attention counted at half. Per sample, forward:
  const nn::TransformerConfig& tc = config_.transformer;
  const double h = static_cast<double>(tc.hidden_size), f = static_cast<double>(tc.ffn_hidden_size);
  const double attn = static_cast<double>(tc.num_attention_heads * tc.kv_channels);
  const double qkv = static_cast<double>(tc.qkv_size());
  const double se = static_cast<double>(enc_seq_), sd = static_cast<double>(dec_seq_);
  const double glu = tc.swiglu ? 1.5 : 1.0;
  const double mlp = 2.0 * h * f * glu * 2.0;
  const double encoder_layer =
      se * (2.0 * h * qkv + 2.0 * attn * h + mlp) + 2.0 * 2.0 * se * se * attn;
  const double decoder_layer = sd * (2.0 * h * qkv + 2.0 * attn * h + mlp) +
                               2.0 * 2.0 * sd * sd * attn / 2.0 +        // causal self-attention
                               sd * (2.0 * h * attn + 2.0 * attn * h) +  // cross q and proj
                               se * 2.0 * h * 2.0 * attn +               // cross k, v of memory
                               2.0 * 2.0 * sd * se * attn;
  const double head = sd * 2.0 * h * static_cast<double>(padded_vocab_);
  const double forward = static_cast<double>(t5_.encoder_num_layers) * encoder_layer +
                         static_cast<double>(t5_.decoder_num_layers) * decoder_layer + head;
  return 3.0 * forward * static_cast<double>(samples);
}

ModelDimensions T5Model::dimensions() const {
  // For memory planning: both stacks' layers at the encoder's (longer) sequence, an upper bound.
  const nn::TransformerConfig& tc = config_.transformer;
  return {t5_.encoder_num_layers + t5_.decoder_num_layers,
          tc.hidden_size,
          tc.num_attention_heads,
          tc.ffn_hidden_size,
          std::max(enc_seq_, dec_seq_),
          padded_vocab_};
}

std::string T5Model::describe() const {
  const nn::TransformerConfig& tc = config_.transformer;
  const char* positions[] = {"learned positions", "rope", "no positions", "relative positions"};
  std::ostringstream out;
  out << "T5: " << t5_.encoder_num_layers << "+" << t5_.decoder_num_layers << " layers, hidden "
      << tc.hidden_size << ", " << tc.num_attention_heads << " heads, kv " << tc.kv_channels
      << ", ffn " << tc.ffn_hidden_size << ", vocab " << info().vocab_size << " padded to "
      << padded_vocab_ << ", encoder seq " << enc_seq_ << ", decoder seq " << dec_seq_ << ", "
      << positions[static_cast<int>(config_.position_embedding)]
      << (config_.untie_embeddings_and_output_weights ? ", untied head" : "");
  return nn::describe_model_layout(out.str(), const_cast<T5Model*>(this)->parameters().numel(),
                                   tp(), info().pipeline);
}

}  // namespace megatron::t5
