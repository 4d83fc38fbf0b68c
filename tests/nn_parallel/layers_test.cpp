// Each tensor-parallel layer on 2 ranks against its unsplit version run on the same rank, with and
// without sequence parallelism: forward outputs, input gradients and each rank's parameter
// gradients (= the matching slice of the unsplit ones), in fp32 to a relative 1e-5 of each
// tensor's scale; initial shards equal the slices of the unsplit initialisation exactly.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "megatron/nn/attention.h"
#include "megatron/nn/core_blocks.h"
#include "megatron/nn/cross_attention.h"
#include "megatron/nn/embedding.h"
#include "megatron/nn/layer.h"
#include "megatron/nn/lm_loss.h"
#include "megatron/nn/mlp.h"
#include "tp_test_util.h"

namespace megatron::tp_test {
namespace {

constexpr std::uint64_t kSeed = 99;
constexpr double kTol = 1e-5;  // fp32: split GEMMs only reorder sums
constexpr std::int64_t kS = 8, kB = 2, kH = 16, kVocab = 48;

Backend& cpu() {
  return backend_for(Device::cpu());
}

nn::TransformerConfig small_config() {
  nn::TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = kH;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 24;
  c.add_qkv_bias = true;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  c.init_method_std = 0.3f;
  return c;
}

// Initialises both sets from one seed and checks each shard is the slice of the unsplit
// initialisation; then gives every parameter (biases and norm weights too) random values, the
// same global ones on both sides, so every path carries a visible gradient.
void init_and_randomize(ParameterSet& full, ParameterSet& split) {
  nn::initialize_parameters(cpu(), full, kSeed);
  nn::initialize_parameters(cpu(), split, kSeed);
  ASSERT_EQ(full.size(), split.size());
  for (std::size_t i = 0; i < full.size(); ++i) {
    ASSERT_EQ(split[i].name, full[i].name);
    EXPECT_EQ(split[i].value.to_vector<float>(),
              shard_of(split[i], full[i].value).to_vector<float>())
        << split[i].name << " is not the slice of the unsplit initialisation";
    const Tensor global = random_tensor(full[i].global_shape, 1000 + static_cast<unsigned>(i), 0.3);
    cpu().copy(global, full[i].value);
    cpu().copy(shard_of(split[i], global), split[i].value);
  }
}

void check_grads(ParameterSet& full, ParameterSet& split, const nn::TensorParallelism& tp,
                 double tol = kTol) {
  reduce_sequence_parallel_grads(split, tp);
  for (std::size_t i = 0; i < full.size(); ++i)
    expect_close(split[i].grad, shard_of(split[i], full[i].grad), tol, split[i].name + " grad");
}

// The split side's view of an activation: the sequence shard under sequence parallelism.
Tensor local(const Tensor& t, const nn::TensorParallelism& tp) {
  return tp.sp() ? sequence_shard(t, tp) : t;
}

Tensor empty_like(const Tensor& t) {
  return Tensor::empty(t.shape(), t.dtype());
}

class TpLayers : public ::testing::TestWithParam<bool> {
 protected:
  nn::TensorParallelism tp() const { return tensor_group(GetParam()); }
};

void run_mlp(bool swiglu, const nn::TensorParallelism& tp) {
  nn::TransformerConfig c = small_config();
  c.swiglu = swiglu;
  ParameterSet full, split;
  nn::ParamFactory ff{full}, sf{split, Device::cpu(), DType::f32, tp};
  nn::Mlp mf, ms;
  mf.declare(ff, "mlp", c);
  ms.declare(sf, "mlp", c);
  if (swiglu) {
    EXPECT_EQ(split[0].partition_blocks, 2);  // [gate_r; up_r]
  }
  init_and_randomize(full, split);

  const nn::LayerContext ctx{cpu()};
  const Tensor x = random_tensor({kS * kB, kH}, 1), dy = random_tensor({kS * kB, kH}, 2);
  Tensor y = empty_like(x), dx = empty_like(x);
  nn::Mlp::Saved saved;
  mf.forward(ctx, x, y, saved);
  mf.backward(ctx, x, dy, saved, dx);

  const Tensor xs = local(x, tp), dys = local(dy, tp);
  Tensor ys = empty_like(xs), dxs = empty_like(xs);
  nn::Mlp::Saved ssaved;
  ms.forward(ctx, xs, ys, ssaved);
  ms.backward(ctx, xs, dys, ssaved, dxs);
  expect_close(ys, local(y, tp), kTol, "mlp output");
  expect_close(dxs, local(dx, tp), kTol, "mlp input grad");
  check_grads(full, split, tp);
}

TEST_P(TpLayers, MlpGelu) {
  run_mlp(false, tp());
}

TEST_P(TpLayers, MlpSwiglu) {
  run_mlp(true, tp());
}

void run_attention(bool gqa_rotary, const nn::TensorParallelism& tp) {
  nn::TransformerConfig c = small_config();
  std::optional<nn::RotaryTables> rotary;
  if (gqa_rotary) {
    c.num_query_groups = 2;
    c.rotary_dim = 4;
    rotary = nn::make_rotary_tables(kS, 4, 10000, DType::f32);
  }
  nn::LayerInputs inputs;
  inputs.set_rotary(rotary ? &*rotary : nullptr);
  ParameterSet full, split;
  nn::ParamFactory ff{full}, sf{split, Device::cpu(), DType::f32, tp};
  nn::SelfAttention af, as;
  af.declare(ff, "attn", c);
  as.declare(sf, "attn", c);
  init_and_randomize(full, split);

  const nn::LayerContext ctx{cpu()};
  const Tensor x = random_tensor({kS, kB, kH}, 3), dy = random_tensor({kS, kB, kH}, 4);
  Tensor y = empty_like(x), dx = empty_like(x);
  nn::SelfAttention::Saved saved;
  af.forward(ctx, x, inputs, 0, y, saved);
  af.backward(ctx, x, dy, inputs, 0, saved, dx);

  const Tensor xs = local(x, tp), dys = local(dy, tp);
  Tensor ys = empty_like(xs), dxs = empty_like(xs);
  nn::SelfAttention::Saved ssaved;
  as.forward(ctx, xs, inputs, 0, ys, ssaved);
  as.backward(ctx, xs, dys, inputs, 0, ssaved, dxs);
  expect_close(ys, local(y, tp), kTol, "attention output");
  expect_close(dxs, local(dx, tp), kTol, "attention input grad");
  check_grads(full, split, tp);
}

TEST_P(TpLayers, AttentionHeads) {
  run_attention(false, tp());
}

TEST_P(TpLayers, AttentionQueryGroupsRotary) {
  run_attention(true, tp());
}

// A whole layer with hidden dropout on: replicated activations use the same masks on every rank
// and sequence shards continue the unsplit stream, so the split layer still equals the unsplit
// one. (Attention dropout is per rank, as Megatron's; it is off here.)
TEST_P(TpLayers, TransformerLayerWithHiddenDropout) {
  const nn::TensorParallelism tp = this->tp();
  nn::TransformerConfig c = small_config();
  c.hidden_dropout = 0.2f;
  c.num_query_groups = 2;
  c.swiglu = true;
  c.normalization = nn::NormKind::rmsnorm;
  ParameterSet full, split;
  nn::ParamFactory ff{full}, sf{split, Device::cpu(), DType::f32, tp};
  nn::Layer lf, ls;
  // Dropout sites 4..6: those of layer 1 behind the embedding's site 0.
  lf.declare(ff, "layer", c, nn::transformer_layer_spec(), 4);
  ls.declare(sf, "layer", c, nn::transformer_layer_spec(), 4);
  for (auto& p : split)
    EXPECT_EQ(p->sequence_parallel, tp.sp() && p->partition_dim < 0) << p->name;
  init_and_randomize(full, split);

  const nn::LayerContext ctx{cpu(), true, 5, 3};
  const Tensor x = random_tensor({kS, kB, kH}, 5), dy = random_tensor({kS, kB, kH}, 6);
  Tensor y = empty_like(x), dx = empty_like(x);
  nn::Layer::Saved saved;
  const nn::LayerInputs inputs;  // no rotary, causal
  lf.forward(ctx, x, inputs, y, saved, true);
  lf.backward(ctx, dy, inputs, saved, dx);

  const Tensor xs = local(x, tp), dys = local(dy, tp);
  Tensor ys = empty_like(xs), dxs = empty_like(xs);
  nn::Layer::Saved ssaved;
  ls.forward(ctx, xs, inputs, ys, ssaved, true);
  ls.backward(ctx, dys, inputs, ssaved, dxs);
  expect_close(ys, local(y, tp), kTol, "layer output");
  expect_close(dxs, local(dx, tp), kTol, "layer input grad");
  check_grads(full, split, tp);
}

// Encoder output of kSk positions (a different length from the decoder's kS): sample 1's last
// two are padding.
constexpr std::int64_t kSk = 6;
Tensor memory_padding() {
  std::vector<std::uint8_t> m(static_cast<std::size_t>(kB * kSk), 0);
  m[static_cast<std::size_t>(2 * kSk - 1)] = m[static_cast<std::size_t>(2 * kSk - 2)] = 1;
  return Tensor::from(m, {kB, kSk});
}

// Cross-attention: whole heads per rank; under sequence parallelism x and memory are sequence
// shards and so is the accumulated memory gradient.
TEST_P(TpLayers, CrossAttention) {
  const nn::TensorParallelism tp = this->tp();
  const nn::TransformerConfig c = small_config();
  ParameterSet full, split;
  nn::ParamFactory ff{full}, sf{split, Device::cpu(), DType::f32, tp};
  nn::CrossAttention af, as;
  af.declare(ff, "cross_attention", c);
  as.declare(sf, "cross_attention", c);
  init_and_randomize(full, split);
  nn::LayerInputs inputs;
  inputs.set(nn::layer_input::memory_padding_mask, memory_padding());

  const nn::LayerContext ctx{cpu()};
  const Tensor x = random_tensor({kS, kB, kH}, 3), dy = random_tensor({kS, kB, kH}, 4);
  const Tensor memory = random_tensor({kSk, kB, kH}, 12);
  Tensor y = empty_like(x), dx = empty_like(x);
  Tensor dmemory = Tensor::zeros(memory.shape(), DType::f32);
  nn::CrossAttention::Saved saved;
  af.forward(ctx, x, memory, inputs, 0, y, saved);
  af.backward(ctx, x, memory, dy, inputs, 0, saved, dx, dmemory);

  const Tensor xs = local(x, tp), dys = local(dy, tp), ms = local(memory, tp);
  Tensor ys = empty_like(xs), dxs = empty_like(xs);
  Tensor dms = Tensor::zeros(ms.shape(), DType::f32);
  nn::CrossAttention::Saved ssaved;
  as.forward(ctx, xs, ms, inputs, 0, ys, ssaved);
  as.backward(ctx, xs, ms, dys, inputs, 0, ssaved, dxs, dms);
  expect_close(ys, local(y, tp), kTol, "cross-attention output");
  expect_close(dxs, local(dx, tp), kTol, "cross-attention input grad");
  expect_close(dms, local(dmemory, tp), kTol, "cross-attention memory grad");
  check_grads(full, split, tp);
}

// T5's decoder layer with hidden dropout on, as TransformerLayerWithHiddenDropout.
TEST_P(TpLayers, DecoderLayerWithHiddenDropout) {
  const nn::TensorParallelism tp = this->tp();
  nn::TransformerConfig c = small_config();
  c.hidden_dropout = 0.2f;
  const nn::LayerSpec spec = nn::decoder_layer_spec(nn::AttentionMask::causal);
  ParameterSet full, split;
  nn::ParamFactory ff{full}, sf{split, Device::cpu(), DType::f32, tp};
  nn::Layer lf, ls;
  lf.declare(ff, "layer", c, spec, 4);
  ls.declare(sf, "layer", c, spec, 4);
  init_and_randomize(full, split);

  const nn::LayerContext ctx{cpu(), true, 5, 3};
  const Tensor x = random_tensor({kS, kB, kH}, 5), dy = random_tensor({kS, kB, kH}, 6);
  const Tensor memory = random_tensor({kSk, kB, kH}, 13);
  Tensor dmemory = Tensor::zeros(memory.shape(), DType::f32);
  nn::LayerInputs inputs;
  inputs.set(nn::layer_input::memory, memory);
  inputs.set(nn::layer_input::memory_padding_mask, memory_padding());
  inputs.collect_gradient(nn::layer_input::memory, dmemory);
  Tensor y = empty_like(x), dx = empty_like(x);
  nn::Layer::Saved saved;
  lf.forward(ctx, x, inputs, y, saved, true);
  lf.backward(ctx, dy, inputs, saved, dx);

  Tensor dms = Tensor::zeros(local(memory, tp).shape(), DType::f32);
  nn::LayerInputs sinputs = inputs;
  sinputs.set(nn::layer_input::memory, local(memory, tp));
  sinputs.collect_gradient(nn::layer_input::memory, dms);
  const Tensor xs = local(x, tp), dys = local(dy, tp);
  Tensor ys = empty_like(xs), dxs = empty_like(xs);
  nn::Layer::Saved ssaved;
  ls.forward(ctx, xs, sinputs, ys, ssaved, true);
  ls.backward(ctx, dys, sinputs, ssaved, dxs);
  expect_close(ys, local(y, tp), kTol, "decoder layer output");
  expect_close(dxs, local(dx, tp), kTol, "decoder layer input grad");
  expect_close(dms, local(dmemory, tp), kTol, "decoder layer memory grad");
  check_grads(full, split, tp);
}

Tensor random_ids(const Shape& shape, std::int64_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& id : ids)
    id = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
  return Tensor::from(ids, shape);
}

// Vocabulary-parallel word embeddings (ids of both halves in every sequence) plus learned
// positions and embedding dropout.
TEST_P(TpLayers, VocabParallelEmbedding) {
  const nn::TensorParallelism tp = this->tp();
  ParameterSet full, split;
  nn::ParamFactory ff{full}, sf{split, Device::cpu(), DType::f32, tp};
  nn::Embedding ef, es;
  ef.declare(ff, "embedding", kVocab, kH, kS, 0.02f, 0.1f);
  es.declare(sf, "embedding", kVocab, kH, kS, 0.02f, 0.1f);
  EXPECT_EQ(es.vocab_start(), tp.rank * kVocab / tp.size);
  EXPECT_EQ(es.word_embeddings->value.size(0), kVocab / tp.size);
  init_and_randomize(full, split);

  const nn::LayerContext ctx{cpu(), true, 7, 2};
  const Tensor ids = random_ids({kS, kB}, kVocab, 8), dy = random_tensor({kS, kB, kH}, 9);
  Tensor y = Tensor::empty({kS, kB, kH}, DType::f32);
  ef.forward(ctx, ids, 0, y);
  ef.backward(ctx, ids, 0, dy);

  const Tensor dys = local(dy, tp);
  Tensor ys = empty_like(dys);
  es.forward(ctx, ids, 0, ys);
  es.backward(ctx, ids, 0, dys);
  expect_close(ys, local(y, tp), kTol, "embedding output");
  check_grads(full, split, tp);
}

// The fused logits + cross-entropy over a vocabulary split in two, with a partial loss mask and
// a non-unit loss scale: every third row masked (all rows computed), or only every third row
// counted (BERT-like: only those rows go through the output layer).
void check_vocab_parallel_cross_entropy(const nn::TensorParallelism& tp, bool sparse) {
  ParameterSet full, split;
  nn::ParamFactory ff{full}, sf{split, Device::cpu(), DType::f32, tp};
  Parameter& wf = ff.declare("output_layer.weight", {kVocab, kH}, ParamInit::normal, 0.3f, true,
                             nn::Split{0, 1});
  Parameter& ws = sf.declare("output_layer.weight", {kVocab, kH}, ParamInit::normal, 0.3f, true,
                             nn::Split{0, 1});
  init_and_randomize(full, split);

  const std::int64_t rows = kS * kB;
  const Tensor hidden = random_tensor({rows, kH}, 10);
  const Tensor labels = random_ids({rows}, 45, 11);  // padding rows are never targets
  std::vector<float> mask(static_cast<std::size_t>(rows), sparse ? 0.0f : 1.0f);
  for (std::size_t i = 0; i < mask.size(); i += 3)
    mask[i] = sparse ? 1.0f : 0.0f;
  const Tensor loss_mask = Tensor::from(mask, {rows});
  Tensor dh = empty_like(hidden);
  const nn::LmLossResult r =
      nn::lm_loss(cpu(), hidden, wf, labels, loss_mask, 4.0f, &dh, DType::f32);

  const Tensor hs = local(hidden, tp);
  Tensor dhs = empty_like(hs);
  const nn::LmLossResult rs =
      nn::lm_loss(cpu(), hs, ws, labels, loss_mask, 4.0f, &dhs, DType::f32, tp);
  EXPECT_NEAR(rs.loss_sum, r.loss_sum, 1e-6 * r.loss_sum);
  EXPECT_EQ(rs.token_count, r.token_count);
  expect_close(dhs, local(dh, tp), kTol, "hidden grad");
  check_grads(full, split, tp);
}

TEST_P(TpLayers, VocabParallelCrossEntropy) {
  check_vocab_parallel_cross_entropy(tp(), false);
}

TEST_P(TpLayers, VocabParallelCrossEntropyOnlyCountedRows) {
  check_vocab_parallel_cross_entropy(tp(), true);
}

INSTANTIATE_TEST_SUITE_P(Split, TpLayers, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "SequenceParallel" : "TensorParallel";
                         });

}  // namespace
}  // namespace megatron::tp_test
